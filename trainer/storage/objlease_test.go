package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/internal/s3test"
	"github.com/nomad-train/nomad-train/trainer/storage/objstore"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

func TestObjectLease(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		expires time.Duration // of a lease left by another writer
		wantErr error
	}{
		{"held by a live writer", time.Hour, ErrLocked},
		{"expired", -time.Minute, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.NewBucket(t)}, objstore.Config{})
			must.NoError(t, err)
			b, err := json.Marshal(leaseBody{Holder: "other", Host: "elsewhere", PID: 1, Expires: time.Now().Add(tc.expires)})
			must.NoError(t, err)
			_, err = st.Put(ctx, "r/"+objLeaseKey, bytes.NewReader(b))
			must.NoError(t, err)
			r, err := OpenObject(ctx, st, "r", Policy{}, WithLeaseTTL(time.Second))
			if tc.wantErr != nil {
				must.ErrorIs(t, err, tc.wantErr)
				return
			}
			must.NoError(t, err)
			// Ours now: a second writer is refused while we hold it.
			_, err = OpenObject(ctx, st, "r", Policy{}, WithLeaseTTL(time.Hour))
			must.ErrorIs(t, err, ErrLocked)
			must.NoError(t, r.Close())
			_, err = st.Head(ctx, "r/"+objLeaseKey)
			must.ErrorIs(t, err, objstore.ErrNotFound, must.Sprint("Close releases the lease"))
		})
	}
}

// A writer that finds the lease held by a live writer is refused once it
// sees the holder renew it, a third of the holder's time to live after
// its last write, rather than at expiry (a second tuner of a running
// experiment used to wait the whole TTL before its refusal). A lease that
// says nothing of its renewal is looked at only at expiry.
func TestLeaseWaiterLooksAtTheRenewal(t *testing.T) {
	now := time.Now()
	l := &lease{ttl: 30 * time.Second}
	must.Eq(t, []time.Time{now.Add(13 * time.Second), now.Add(30 * time.Second)},
		l.looks(leaseBody{Renews: now.Add(10 * time.Second), Expires: now.Add(30 * time.Second)}))
	must.Eq(t, []time.Time{now.Add(30 * time.Second)}, l.looks(leaseBody{Expires: now.Add(30 * time.Second)}))
	must.Eq(t, []time.Time{now.Add(time.Second)},
		l.looks(leaseBody{Renews: now.Add(time.Second), Expires: now.Add(time.Second)}))

	srv := s3test.Start(t)
	st := leaseStore(t, srv)
	ctx := context.Background()
	const ttl = 9 * time.Second // renewed every 3 s
	holder, err := OpenObject(ctx, st, "r", Policy{}, WithLeaseTTL(ttl))
	must.NoError(t, err)
	defer holder.Close()
	start := time.Now()
	_, err = OpenObject(ctx, st, "r", Policy{}, WithLeaseTTL(ttl))
	must.ErrorIs(t, err, ErrLocked)
	took := time.Since(start)
	must.Less(t, 2*ttl/3, took, must.Sprintf("refused after %v, at the renewal (3 s), not at expiry (9 s)", took))
}

// A reader following a run reads only the segments after its cursor:
// one deleted behind its back does not disappear from its view.
func TestObjectFollowReadsOnlyNew(t *testing.T) {
	b := s3Backend(t)
	w := b.open(t, Policy{})
	defer w.Close()
	must.NoError(t, w.Append(Record{Step: 0}))
	ro := b.openRO(t)
	defer ro.Close()
	recs, err := ro.Records()
	must.NoError(t, err)
	must.SliceLen(t, 1, recs)
	or := ro.(*ObjectRun)
	must.NoError(t, or.st.Delete(context.Background(), w.(*ObjectRun).keys[0]))
	must.NoError(t, w.Append(Record{Step: 1}))
	recs, err = ro.Records()
	must.NoError(t, err)
	must.SliceLen(t, 2, recs)
	must.EqOp(t, w.(*ObjectRun).keys[1], or.cursor)
}

// A run kept on S3 keeps its failure mark there, found through the AWS
// environment alone.
func TestFailedMarkOnS3(t *testing.T) {
	srv := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	root := "s3://" + srv.Bucket + "/runs"
	_, ok, err := FailedForGood(root, "r", "a1")
	must.NoError(t, err)
	must.False(t, ok)
	must.NoError(t, MarkFailed(root, "r", Failure{Reason: "bad config", ExitCode: 3, Attempt: "a1"}))
	f, ok, err := FailedForGood(root, "r", "a1")
	must.NoError(t, err)
	must.True(t, ok)
	must.EqOp(t, "bad config", f.Reason)
	_, ok, err = FailedForGood(root, "r", "a2")
	must.NoError(t, err)
	must.False(t, ok, must.Sprint("another attempt's mark"))
	// As the driver reads it: with the task's keys only, whatever the
	// process has; a task without keys reads nothing.
	task := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey,
		"AWS_REGION=" + srv.Region, "AWS_ENDPOINT_URL_S3=" + srv.Endpoint}
	f, ok, err = FailedForGood(root, "r", "a1", WithTaskEnviron(task), WithStorageOptions(workerenv.StorageOptions{PathStyle: true}))
	must.NoError(t, err)
	must.True(t, ok)
	must.EqOp(t, "bad config", f.Reason)
	_, ok, err = FailedForGood(root, "r", "a1", WithTaskEnviron(task[2:]))
	must.ErrorIs(t, err, objstore.ErrNoKeys)
	must.False(t, ok)
	must.NoError(t, ClearFailed(root, "r"))
	_, ok, err = FailedForGood(root, "r", "a1")
	must.NoError(t, err)
	must.False(t, ok)
}

// A writer whose context is over by the time it closes (a gang that broke
// cancels the generation's context first) still deletes its lease. It
// used to fail the delete with that context, so the next writer (the new
// gang's rank 0, in the multi-node proof) waited out the lease's TTL: 25 s
// of a 30 s lease after a node loss.
func TestObjectLeaseReleasedAfterCancel(t *testing.T) {
	srv := s3test.Start(t)
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.NewBucket(t)}, objstore.Config{})
	must.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := OpenObject(ctx, st, "r", Policy{}, WithLeaseTTL(time.Hour))
	must.NoError(t, err)
	cancel()
	_ = r.Close()
	_, err = st.Head(context.Background(), "r/"+objLeaseKey)
	must.ErrorIs(t, err, objstore.ErrNotFound, must.Sprint("Close releases the lease even after its context ended"))
	_, err = OpenObject(context.Background(), st, "r", Policy{}, WithLeaseTTL(time.Hour))
	must.NoError(t, err, must.Sprint("the next writer opens at once"))
}

// Two writers that found the same lease expired: the first takes it over;
// the second, acting on the ETag it read before, neither takes it nor
// deletes the first's (before: it deleted whatever lease was there, then
// both held one).
func TestExpiredLeaseTakeOverIsConditional(t *testing.T) {
	srv := s3test.Start(t)
	ctx := context.Background()
	st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.NewBucket(t)}, objstore.Config{})
	must.NoError(t, err)
	key := "r/" + objLeaseKey
	b, err := json.Marshal(leaseBody{Holder: "gone", Host: "elsewhere", PID: 1, Expires: time.Now().Add(-time.Minute)})
	must.NoError(t, err)
	_, err = st.Put(ctx, key, bytes.NewReader(b))
	must.NoError(t, err)
	info, err := st.Head(ctx, key)
	must.NoError(t, err)
	taker := func(holder string) *lease {
		return &lease{st: st, key: key, ttl: time.Hour, now: time.Now, log: hclog.NewNullLogger(), holder: holder}
	}
	first, second := taker("first"), taker("second")
	must.NoError(t, first.takeOver(ctx, info.ETag))
	must.ErrorIs(t, second.takeOver(ctx, info.ETag), objstore.ErrChanged)
	cur, etag, err := first.read(ctx)
	must.NoError(t, err)
	must.EqOp(t, "first", cur.Holder)
	must.EqOp(t, first.etag, etag)
}

// A renewal made while the server is silent (a relay cut: the holder's
// connections dead for good) fails after a quarter of the lease's time to
// live, not after the store's 30 s stall timeout, and goes again on a new
// connection once traffic flows: the lease never expires, where a renewal
// held for 30 s would have let it.
func TestLeaseRenewalOutlivesADeadConnection(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetKeys(t)
	relay := s3test.NewRelay(t, srv.Endpoint)
	ctx := context.Background()
	holderStore, err := objstore.Open(ctx, "s3://"+srv.Bucket, objstore.Config{Endpoint: relay.Endpoint, Region: srv.Region,
		PathStyle: true, RetryFor: 20 * time.Second})
	must.NoError(t, err)
	must.EqOp(t, objstore.DefaultStallTimeout, holderStore.StallTimeout())
	const ttl = 8 * time.Second // renewed every 2.67 s, each request allowed 2 s of silence
	r, err := OpenObject(ctx, holderStore, "r", Policy{}, WithLeaseTTL(ttl))
	must.NoError(t, err)
	defer r.Close()

	relay.Cut()
	time.Sleep(1500 * time.Millisecond)
	relay.Mend()
	cut := time.Now()
	time.Sleep(ttl + time.Second - 1500*time.Millisecond) // past any expiry the cut could have caused

	direct, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.Bucket}, objstore.Config{})
	must.NoError(t, err)
	rc, _, err := direct.Get(ctx, "r/"+objLeaseKey)
	must.NoError(t, err)
	var b leaseBody
	must.NoError(t, json.NewDecoder(rc).Decode(&b))
	rc.Close()
	must.True(t, b.Expires.After(time.Now()), must.Sprintf("the lease expired at %v, %v after the cut ended", b.Expires, b.Expires.Sub(cut)))
	must.NoError(t, r.Close(), must.Sprint("still the holder: it releases its lease"))
}

// A lease whose holder was a process of this machine (this kernel and pid
// namespace) that no longer exists is taken over at once: a run started
// again after its launcher and workers were SIGKILLed waited out the
// whole time to live. A live holder, or one of another machine, is waited
// for as before.
func TestLeaseOfAGoneProcessIsTakenAtOnce(t *testing.T) {
	if pidSpace() == "" {
		t.Skip("this platform does not say which pid space a process is in")
	}
	dead := exec.Command("true")
	must.NoError(t, dead.Run())
	srv := s3test.Start(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		space string
		pid   int
		taken bool
	}{
		{"gone, here", pidSpace(), dead.Process.Pid, true},
		{"alive, here", pidSpace(), os.Getppid(), false},
		{"gone, elsewhere", "another-boot pid:[1]", dead.Process.Pid, false},
		{"an older lease", "", dead.Process.Pid, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := objstore.New(srv.Client(t), objstore.Location{Bucket: srv.NewBucket(t)}, objstore.Config{})
			must.NoError(t, err)
			b, err := json.Marshal(leaseBody{Holder: "killed", Host: "h", PID: tc.pid, PIDSpace: tc.space, Expires: time.Now().Add(time.Hour)})
			must.NoError(t, err)
			_, err = st.Put(ctx, "r/"+objLeaseKey, bytes.NewReader(b))
			must.NoError(t, err)
			r, err := OpenObject(ctx, st, "r", Policy{}, WithLeaseTTL(30*time.Second))
			if !tc.taken {
				must.ErrorIs(t, err, ErrLocked) // held for an hour: refused without a wait
				return
			}
			must.NoError(t, err)
			must.NoError(t, r.Close())
		})
	}
}
