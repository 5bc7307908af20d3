package nomad

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	consul "github.com/hashicorp/consul/api"

	"github.com/nomad-train/nomad-train/trainer/rendezvous"
	"github.com/nomad-train/nomad-train/trainer/rendezvous/storeuri"
	"github.com/nomad-train/nomad-train/trainer/storage"
)

// Rank 0 publishes the run's progress so the CLI can show it without
// reaching the workers. Two sources, tried in order:
//
//  1. the run's records in its storage (StoreProgress), when it is on an
//     object store or the machine running the CLI mounts the same storage;
//  2. the Consul KV key ProgressKey(namespace, job, run), whose value is ONE progress
//     record in exactly the progress.jsonl line format (storage.Record on
//     the wire: {"step":..,"time":..,"metrics":{..},"generation":..,
//     "attempt":..}), overwritten by rank 0 after each Report.

// ProgressKey is the Consul KV key rank 0 of job's run writes its latest
// report to: the run's "<run>/progress" under the job's rendezvous prefix
// (storeuri.NomadJobPrefix), which the train driver gives the workers.
func ProgressKey(namespace, jobID, run string) string {
	return storeuri.NomadJobPrefix(namespace, jobID) + rendezvous.ProgressKey(run)
}

// ErrNoProgress means no source holds a report for the run yet.
var ErrNoProgress = errors.New("no progress reported yet")

// ProgressSource reads a run's latest report.
type ProgressSource interface {
	// Latest returns the newest report, or ErrNoProgress.
	Latest(ctx context.Context) (storage.Record, error)
}

// localRoot is the directory a storage path names on this machine, or ""
// when it names none: an object store, or a relative path (the workers
// resolved it against their task directories on some client, not against
// this process's working directory).
func localRoot(storagePath string) string {
	root, err := storage.LocalDir(storagePath)
	if err != nil || !filepath.IsAbs(root) {
		return ""
	}
	return root
}

// mountedAt is localRoot when that directory is on this machine, else "".
// A first run's own directory need not exist: its workers make it.
func mountedAt(storagePath string) string {
	root := localRoot(storagePath)
	if root == "" {
		return ""
	}
	if st, err := os.Stat(root); err != nil || !st.IsDir() {
		return ""
	}
	return root
}

// KV is the one Consul KV call ConsulProgress needs; *consul.KV has it.
type KV interface {
	Get(key string, q *consul.QueryOptions) (*consul.KVPair, *consul.QueryMeta, error)
}

// KVTree deletes a Consul KV prefix (consul/api's *KV).
type KVTree interface {
	DeleteTree(prefix string, w *consul.WriteOptions) (*consul.WriteMeta, error)
}

// ClearRendezvous removes what the workers of job left in Consul under its
// rendezvous prefix (storeuri.NomadJobPrefix): the last gang's state,
// whose generation counts against the failure budget, and the published
// progress. Submitting the job again is a new run with the whole budget;
// the checkpoints it resumes from live in storage, not here. It refuses
// while the job still runs (its workers use those keys).
func ClearRendezvous(ctx context.Context, c API, kv KVTree, namespace, jobID string) error {
	job, err := c.JobInfo(ctx, jobID)
	switch {
	case errors.Is(err, ErrNoSuchRun):
	case err != nil:
		return fmt.Errorf("clearing rendezvous of job %s: %w", jobID, err)
	case job.Status == nil || *job.Status != "dead":
		return fmt.Errorf("clearing rendezvous of job %s: the job is %s", jobID, deref(job.Status, "in an unknown state"))
	}
	prefix := storeuri.NomadJobPrefix(namespace, jobID)
	if _, err := kv.DeleteTree(prefix, (&consul.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("clearing rendezvous %s: %w", prefix, err)
	}
	return nil
}

// ConsulProgress reads the report rank 0 publishes in Consul KV.
type ConsulProgress struct {
	KV KV
	// Namespace and Job name the Nomad job ("" namespace: "default").
	Namespace, Job string
	Run            string
}

// Latest implements ProgressSource.
func (c ConsulProgress) Latest(ctx context.Context) (storage.Record, error) {
	pair, _, err := c.KV.Get(ProgressKey(c.Namespace, c.Job, c.Run), (&consul.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return storage.Record{}, fmt.Errorf("reading progress from consul: %w", err)
	}
	if pair == nil || len(bytes.TrimSpace(pair.Value)) == 0 {
		return storage.Record{}, ErrNoProgress
	}
	return DecodeProgress(pair.Value)
}

// DecodeProgress decodes one published report (a progress.jsonl line).
func DecodeProgress(b []byte) (storage.Record, error) {
	line := append(bytes.TrimSpace(bytes.Clone(b)), '\n')
	recs, err := storage.ReadProgress(bytes.NewReader(line))
	if err != nil {
		return storage.Record{}, fmt.Errorf("decoding published progress: %w", err)
	}
	if len(recs) != 1 {
		return storage.Record{}, fmt.Errorf("decoding published progress: want one record, got %d", len(recs))
	}
	return recs[0], nil
}

// deref is *p, or def for nil.
func deref(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

// ProgressFor picks where to read a run's progress from: its object
// storage, or its storage directory when this machine mounts it, else
// Consul KV when kv is set (the workers publish their latest report
// there), else nowhere (nil). It looks at each read: a first run's workers
// make the storage directories as they start. opts are the object store's
// options.
func ProgressFor(namespace, jobID, run, storagePath string, kv KV, opts ...storage.Option) ProgressSource {
	if storage.IsObjectPath(storagePath) { // any machine reaches object storage
		return &StoreProgress{StoragePath: storagePath, Run: run, Options: opts}
	}
	var fromKV ProgressSource
	if kv != nil {
		fromKV = ConsulProgress{KV: kv, Namespace: namespace, Job: jobID, Run: run}
	}
	if localRoot(storagePath) == "" {
		return fromKV
	}
	return storageOrConsul{store: &StoreProgress{StoragePath: storagePath, Run: run}, kv: fromKV}
}

// storageOrConsul reads the reports from the run's storage when this
// machine mounts it, else from Consul when it can.
type storageOrConsul struct {
	store *StoreProgress
	kv    ProgressSource // nil without Consul
}

func (s storageOrConsul) Latest(ctx context.Context) (storage.Record, error) {
	if s.kv == nil || mountedAt(s.store.StoragePath) != "" {
		return s.store.Latest(ctx)
	}
	return s.kv.Latest(ctx)
}

// EnvConsulKV is the KV endpoint of the Consul agent that CONSUL_HTTP_ADDR
// names (with the rest of consul/api's environment), or nil when it is not
// set.
func EnvConsulKV() *consul.KV {
	if os.Getenv("CONSUL_HTTP_ADDR") == "" {
		return nil
	}
	c, err := consul.NewClient(consul.DefaultConfig())
	if err != nil {
		return nil
	}
	return c.KV()
}
