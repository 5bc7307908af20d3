package nomad

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/nomad/api"
)

// API is the narrow part of the Nomad HTTP API the backend uses. Client
// implements it over nomad/api; tests use a fake. Query methods that take a
// waitIndex block (a Nomad blocking query) until the index moves past it or
// the server's wait time ends, and return the new index.
type API interface {
	// Plan dry-runs job: FailedTGAllocs says which groups would not fit.
	Plan(ctx context.Context, job *api.Job) (*api.JobPlanResponse, error)
	// Register submits job and returns the evaluation it created.
	Register(ctx context.Context, job *api.Job) (*api.JobRegisterResponse, error)
	// Deregister stops jobID; purge also removes it from Nomad's state.
	Deregister(ctx context.Context, jobID string, purge bool) error
	// JobInfo reads a job; an unknown job is ErrNoSuchRun.
	JobInfo(ctx context.Context, jobID string) (*api.Job, error)
	// Jobs lists the jobs whose ID starts with prefix, with their meta.
	Jobs(ctx context.Context, prefix string) ([]*api.JobListStub, error)
	// Allocations lists every allocation of jobID, old ones included.
	Allocations(ctx context.Context, jobID string, waitIndex uint64) ([]*api.AllocationListStub, uint64, error)
	// Evaluations lists the evaluations of jobID.
	Evaluations(ctx context.Context, jobID string, waitIndex uint64) ([]*api.Evaluation, uint64, error)
	// AllocInfo reads one allocation in full.
	AllocInfo(ctx context.Context, allocID string) (*api.Allocation, error)
	// Logs streams a task's stdout or stderr; follow keeps it open.
	Logs(ctx context.Context, alloc *api.Allocation, task, stream string, follow bool) (io.ReadCloser, error)
	// PutVariable writes a Nomad Variable.
	PutVariable(ctx context.Context, v *api.Variable) error
	// DeleteVariable removes a Nomad Variable; a missing one is not an error.
	DeleteVariable(ctx context.Context, path, namespace string) error
	// Nodes lists the client nodes with their resources.
	Nodes(ctx context.Context) ([]*api.NodeListStub, error)
}

// Config says how to reach Nomad, as the Nomad CLI's flags do. Empty fields
// fall back to NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE and NOMAD_REGION
// (read by nomad/api's DefaultConfig).
type Config struct {
	Address   string
	Token     string
	Namespace string
	Region    string
}

// Client implements API over a real nomad/api client.
type Client struct {
	c *api.Client
}

// NewClient connects the API to the Nomad agent cfg names.
func NewClient(cfg Config) (*Client, error) {
	ac := api.DefaultConfig()
	if cfg.Address != "" {
		ac.Address = cfg.Address
	}
	if cfg.Token != "" {
		ac.SecretID = cfg.Token
	}
	if cfg.Namespace != "" {
		ac.Namespace = cfg.Namespace
	}
	if cfg.Region != "" {
		ac.Region = cfg.Region
	}
	c, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("creating nomad client: %w", err)
	}
	return &Client{c: c}, nil
}

// ErrNoSuchRun is returned for a job Nomad does not know.
var ErrNoSuchRun = errors.New("no such run")

// qo is a query that blocks past waitIndex (when not 0) and ends with ctx.
func qo(ctx context.Context, waitIndex uint64) *api.QueryOptions {
	q := &api.QueryOptions{WaitIndex: waitIndex}
	if waitIndex > 0 {
		q.WaitTime = blockingWait
	}
	return q.WithContext(ctx)
}

func wo(ctx context.Context) *api.WriteOptions { return (&api.WriteOptions{}).WithContext(ctx) }

// notFound reports whether err is Nomad's 404.
func notFound(err error) bool {
	var ue api.UnexpectedResponseError
	return errors.As(err, &ue) && ue.StatusCode() == 404
}

// Plan implements API.
func (c *Client) Plan(ctx context.Context, job *api.Job) (*api.JobPlanResponse, error) {
	r, _, err := c.c.Jobs().Plan(job, false, wo(ctx))
	return r, err
}

// Register implements API.
func (c *Client) Register(ctx context.Context, job *api.Job) (*api.JobRegisterResponse, error) {
	r, _, err := c.c.Jobs().Register(job, wo(ctx))
	return r, err
}

// Deregister implements API.
func (c *Client) Deregister(ctx context.Context, jobID string, purge bool) error {
	_, _, err := c.c.Jobs().Deregister(jobID, purge, wo(ctx))
	return err
}

// JobInfo implements API.
func (c *Client) JobInfo(ctx context.Context, jobID string) (*api.Job, error) {
	j, _, err := c.c.Jobs().Info(jobID, qo(ctx, 0))
	if notFound(err) {
		return nil, fmt.Errorf("%w %q", ErrNoSuchRun, jobID)
	}
	return j, err
}

// Jobs implements API.
func (c *Client) Jobs(ctx context.Context, prefix string) ([]*api.JobListStub, error) {
	q := qo(ctx, 0)
	q.Prefix = prefix
	// Job stubs carry meta (how runs are recognised) only when asked.
	js, _, err := c.c.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: true}}, q)
	return js, err
}

// Allocations implements API.
func (c *Client) Allocations(ctx context.Context, jobID string, waitIndex uint64) ([]*api.AllocationListStub, uint64, error) {
	as, m, err := c.c.Jobs().Allocations(jobID, true, qo(ctx, waitIndex))
	if err != nil {
		return nil, 0, err
	}
	return as, m.LastIndex, nil
}

// Evaluations implements API.
func (c *Client) Evaluations(ctx context.Context, jobID string, waitIndex uint64) ([]*api.Evaluation, uint64, error) {
	es, m, err := c.c.Jobs().Evaluations(jobID, qo(ctx, waitIndex))
	if err != nil {
		return nil, 0, err
	}
	return es, m.LastIndex, nil
}

// AllocInfo implements API.
func (c *Client) AllocInfo(ctx context.Context, allocID string) (*api.Allocation, error) {
	a, _, err := c.c.Allocations().Info(allocID, qo(ctx, 0))
	return a, err
}

// Logs implements API: the frames of nomad/api's log stream as a reader.
// Closing the reader (or cancelling ctx) ends the stream.
func (c *Client) Logs(ctx context.Context, alloc *api.Allocation, task, stream string, follow bool) (io.ReadCloser, error) {
	// The stream's request ends with ctx, so a reader that is closed
	// early also ends nomad/api's goroutine blocked on the body.
	ctx, stop := context.WithCancel(ctx)
	cancel := make(chan struct{})
	frames, errs := c.c.AllocFS().Logs(alloc, follow, task, stream, "start", 0, cancel, qo(ctx, 0))
	pr, pw := io.Pipe()
	go func() {
		defer stop()
		defer close(cancel)
		for {
			select {
			case <-ctx.Done():
				pw.CloseWithError(ctx.Err())
				return
			case err := <-errs:
				pw.CloseWithError(err)
				return
			case f, ok := <-frames:
				if !ok {
					pw.Close()
					return
				}
				if len(f.Data) == 0 {
					continue
				}
				if _, err := pw.Write(f.Data); err != nil {
					return // the reader was closed
				}
			}
		}
	}()
	return pr, nil
}

// PutVariable implements API.
func (c *Client) PutVariable(ctx context.Context, v *api.Variable) error {
	_, _, err := c.c.Variables().Create(v, wo(ctx))
	return err
}

// DeleteVariable implements API.
func (c *Client) DeleteVariable(ctx context.Context, path, namespace string) error {
	w := wo(ctx)
	w.Namespace = namespace
	_, err := c.c.Variables().Delete(path, w)
	if notFound(err) {
		return nil
	}
	return err
}

// Nodes implements API.
func (c *Client) Nodes(ctx context.Context) ([]*api.NodeListStub, error) {
	q := qo(ctx, 0)
	q.Params = map[string]string{"resources": "true"}
	ns, _, err := c.c.Nodes().List(q)
	return ns, err
}
