package storage

import (
	"context"
	"io/fs"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// One tuner holds an experiment at a time, on either backend: a second
// is refused while the first holds it and gets it once the first lets
// go. The state reads back whole, the experiment is listed once it has
// one, and results files sit beside it.
func TestExperimentLockAndState(t *testing.T) {
	eachRoot(t, func(t *testing.T, root string, opts []Option) {
		ctx := context.Background()
		where := RunLocation(root, "exp")
		ttl := 3 * time.Second
		opts = append(opts, WithLeaseTTL(ttl))
		_, _, err := ReadExperimentState(ctx, where, opts...)
		must.ErrorIs(t, err, fs.ErrNotExist)
		is, err := IsExperiment(ctx, where, opts...)
		must.NoError(t, err)
		must.False(t, is)
		names, err := ListExperiments(ctx, root, opts...)
		must.NoError(t, err)
		must.SliceEmpty(t, names)

		e, err := OpenExperiment(ctx, where, opts...)
		must.NoError(t, err)
		_, err = OpenExperiment(ctx, where, opts...)
		must.ErrorIs(t, err, ErrLocked)
		must.NoError(t, e.WriteState([]byte(`{"version":1}`)))
		must.NoError(t, e.WriteState([]byte(`{"version":1,"name":"exp"}`)))
		b, written, err := ReadExperimentState(ctx, where, opts...)
		must.NoError(t, err)
		must.EqOp(t, `{"version":1,"name":"exp"}`, string(b))
		must.False(t, written.IsZero())
		is, err = IsExperiment(ctx, where, opts...)
		must.NoError(t, err)
		must.True(t, is)
		must.NoError(t, WriteExperimentFile(ctx, where, "results.csv", []byte("a,b\n"), opts...))
		must.Error(t, WriteExperimentFile(ctx, where, ExperimentStateFile, nil, opts...))
		must.Error(t, WriteExperimentFile(ctx, where, "../results.csv", nil, opts...))
		names, err = ListExperiments(ctx, root, opts...)
		must.NoError(t, err)
		must.Eq(t, []string{"exp"}, names)
		// A run beside it is no experiment.
		r, err := OpenStore(ctx, root, "plain", Policy{}, opts...)
		must.NoError(t, err)
		must.NoError(t, r.Append(Record{Step: 1}))
		must.NoError(t, r.Close())
		names, err = ListExperiments(ctx, root, opts...)
		must.NoError(t, err)
		must.Eq(t, []string{"exp"}, names)

		must.NoError(t, e.Close())
		start := time.Now()
		e2, err := OpenExperiment(ctx, where, opts...)
		must.NoError(t, err)
		must.Less(t, ttl/2, time.Since(start), must.Sprint("a released lock is taken at once"))
		must.NoError(t, e2.Close())
	})
}

// kill stops an object experiment's lease renewal without releasing it,
// as a tuner killed with SIGKILL leaves it.
func kill(e *Experiment) {
	e.lease.stop()
	<-e.lease.done
	e.lease.stop = nil
}

// A tuner killed on an object store leaves its lease: the next tuner
// waits for it to expire and takes it, and the killed one's writes (had
// it only been cut off) are refused from then on. A tuner restarted in
// the same allocation (WithWriter: the same instance, a later start)
// takes it at once: Nomad starts a task again only after it exited.
func TestExperimentLeaseOnS3(t *testing.T) {
	ctx := context.Background()
	root, opts := s3Root(t)
	where := RunLocation(root, "exp")
	ttl := 2 * time.Second
	opts = append(opts, WithLeaseTTL(ttl))

	first, err := OpenExperiment(ctx, where, append(opts, WithWriter("alloc-1", 1))...)
	must.NoError(t, err)
	kill(first)
	start := time.Now()
	second, err := OpenExperiment(ctx, where, append(opts, WithWriter("alloc-1", 2))...)
	must.NoError(t, err)
	must.Less(t, ttl/2, time.Since(start), must.Sprint("the same allocation's later tuner takes the lease at once"))
	must.ErrorIs(t, first.Held(), ErrLocked)
	must.ErrorIs(t, first.WriteState([]byte("{}")), ErrLocked)
	must.NoError(t, second.Held())

	kill(second)
	start = time.Now()
	third, err := OpenExperiment(ctx, where, append(opts, WithWriter("alloc-2", 3))...)
	must.NoError(t, err)
	must.Greater(t, ttl/2, time.Since(start), must.Sprint("another allocation's tuner waits for the lease to expire"))
	must.ErrorIs(t, second.WriteState([]byte("{}")), ErrLocked)
	must.NoError(t, third.WriteState([]byte(`{"version":1}`)))
	must.NoError(t, third.Close())
}
