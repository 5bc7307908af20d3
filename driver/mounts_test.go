package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// TestMountStorage: the rules mountStorage and taskMounts apply, without a
// plugin process.
func TestMountStorage(t *testing.T) {
	const taskDir = "/alloc/w"
	shared := &drivers.Mount{TaskPath: "/mnt/shared", HostPath: "/srv/nfs"}
	cases := []struct {
		name    string
		storage string
		mounts  []*drivers.Mount
		want    string // the rebased storage path
		err     string
	}{
		{name: "no mounts", storage: "/mnt/shared/results", want: "/mnt/shared/results"},
		{name: "under a destination", storage: "/mnt/shared/results", mounts: []*drivers.Mount{shared}, want: "/srv/nfs/results"},
		{name: "the destination itself", storage: "/mnt/shared/", mounts: []*drivers.Mount{shared}, want: "/srv/nfs"},
		{name: "file URI", storage: "file:///mnt/shared/r", mounts: []*drivers.Mount{shared}, want: "/srv/nfs/r"},
		{name: "outside every destination", storage: "/mnt/sharedx/r", mounts: []*drivers.Mount{shared}, want: "/mnt/sharedx/r"},
		{name: "object storage", storage: "s3://bucket/p", mounts: []*drivers.Mount{shared}, want: "s3://bucket/p"},
		{name: "nested mounts: the deepest wins", storage: "/mnt/shared/ckpt/r",
			mounts: []*drivers.Mount{shared, {TaskPath: "/mnt/shared/ckpt", HostPath: "/srv/fast"}}, want: "/srv/fast/r"},
		{name: "relative destination and storage are the task dir's", storage: "data/r",
			mounts: []*drivers.Mount{{TaskPath: "data", HostPath: "/srv/d"}}, want: "/srv/d/r"},
		{name: "relative storage outside mounts stays relative", storage: "results", mounts: []*drivers.Mount{shared}, want: "results"},
		{name: "read-only mount holding storage", storage: "/mnt/shared/r",
			mounts: []*drivers.Mount{{TaskPath: "/mnt/shared", HostPath: "/srv/nfs", Readonly: true}}, err: "read-only volume mounted at /mnt/shared"},
		{name: "read-only mount elsewhere", storage: "/mnt/shared/r",
			mounts: []*drivers.Mount{shared, {TaskPath: "/data", HostPath: "/srv/data", Readonly: true}}, want: "/srv/nfs/r"},
		{name: "storage escaping with ..", storage: "/mnt/shared/../../etc", mounts: []*drivers.Mount{shared}, err: `storage_path "/mnt/shared/../../etc" holds a ".." element`},
		{name: "storage escaping with an escaped ..", storage: "file:///mnt/shared/%2e%2e/x", mounts: []*drivers.Mount{shared}, err: `holds a ".." element`},
		{name: "destination escaping with ..", storage: "/mnt/shared/r",
			mounts: []*drivers.Mount{{TaskPath: "/mnt/shared/..", HostPath: "/srv/nfs"}}, err: `destination "/mnt/shared/.." holds a ".." element`},
		{name: "relative host path", storage: "/mnt/shared/r",
			mounts: []*drivers.Mount{{TaskPath: "/mnt/shared", HostPath: "srv"}}, err: "not an absolute path"},
		{name: "two mounts at one destination", storage: "/x",
			mounts: []*drivers.Mount{shared, {TaskPath: "/mnt/shared/", HostPath: "/srv/b"}}, err: "two mounts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mounts, err := taskMounts(&drivers.TaskConfig{Mounts: tc.mounts}, taskDir)
			var cfg TaskConfig
			if err == nil {
				cfg, err = mountStorage(TaskConfig{StoragePath: tc.storage}, mounts, taskDir)
			}
			if tc.err != "" {
				must.ErrorIs(t, err, ErrMountRefused)
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, cfg.StoragePath)
		})
	}
}

// The checkpoint a run starts from is rebased onto the mount that holds it
// as storage is, also from a read-only mount (the workers only read it),
// and refused where it climbs out with "..".
func TestMountResumeFrom(t *testing.T) {
	const taskDir = "/alloc/w"
	mounts, err := taskMounts(&drivers.TaskConfig{Mounts: []*drivers.Mount{
		{TaskPath: "/mnt/shared", HostPath: "/srv/nfs"},
		{TaskPath: "/models", HostPath: "/srv/models", Readonly: true},
	}}, taskDir)
	must.NoError(t, err)
	for _, tc := range []struct{ from, want, err string }{
		{from: "/mnt/shared/results/qs/checkpoint_000019", want: "/srv/nfs/results/qs/checkpoint_000019"},
		{from: "/models/qs/checkpoint_000019", want: "/srv/models/qs/checkpoint_000019"},
		{from: "file:///models/qs/checkpoint_000001", want: "/srv/models/qs/checkpoint_000001"},
		{from: "/data/qs/checkpoint_000019", want: "/data/qs/checkpoint_000019"},
		{from: "s3://b/p/qs/checkpoints/checkpoint_000019", want: "s3://b/p/qs/checkpoints/checkpoint_000019"},
		{from: "/models/../etc/checkpoint_000001", err: `checkpoint.resume_from "/models/../etc/checkpoint_000001" holds a ".." element`},
	} {
		cfg, err := mountStorage(TaskConfig{StoragePath: "s3://b/p", Checkpoint: CheckpointConfig{ResumeFrom: tc.from}}, mounts, taskDir)
		if tc.err != "" {
			must.ErrorIs(t, err, ErrMountRefused)
			must.ErrorContains(t, err, tc.err)
			continue
		}
		must.NoError(t, err)
		must.EqOp(t, tc.want, cfg.Checkpoint.ResumeFrom)
		must.EqOp(t, "s3://b/p", cfg.StoragePath)
	}
}

// mountTask is a task config whose script runs with storage_path.
func mountTask(storagePath, script string) string {
	return fmt.Sprintf(`
command      = "/bin/sh"
args         = ["-c", %q]
launcher     = "direct"
run_name     = "mounted"
world_size   = 1
storage_path = %q
`, script, storagePath)
}

// TestWireMounts: a StartTask carrying Mounts, as a Nomad client sends for
// a host or CSI volume_mount. The driver declares mount support (before,
// NO_MOUNTS: Nomad refused such tasks), rebases a storage_path under a
// destination onto the mount's host path, tells the worker where each
// volume is, and refuses storage on a read-only mount and paths that
// climb out with "..".
func TestWireMounts(t *testing.T) {
	n := launchPlugin(t)
	n.configure(t, `stats_interval = "1s"`)
	caps, err := n.driver.Capabilities(testCtx(t), &drivers.CapabilitiesRequest{})
	must.NoError(t, err)
	must.Eq(t, drivers.DriverCapabilities_ANY_MOUNTS, caps.GetCapabilities().GetMountConfigs())

	host, data := t.TempDir(), t.TempDir()              // the volumes' host paths (Nomad's)
	dest := filepath.Join(t.TempDir(), "mnt", "shared") // never created: only the host path exists
	mounts := func(readOnly bool) []*drivers.Mount {
		return []*drivers.Mount{
			{TaskPath: dest, HostPath: host, Readonly: readOnly},
			{TaskPath: "/mnt/data", HostPath: data, Readonly: true},
		}
	}

	t.Run("storage rebased and mounts in the env", func(t *testing.T) {
		f := newTaskFixture(t, n, "worker", mountTask(dest+"/results", `
mkdir -p "$NOMAD_TRAIN_STORAGE_PATH/$NOMAD_TRAIN_RUN" && echo written > "$NOMAD_TRAIN_STORAGE_PATH/$NOMAD_TRAIN_RUN/probe"
echo "storage=$NOMAD_TRAIN_STORAGE_PATH"
echo "mounts=$NOMAD_TRAIN_MOUNTS"`))
		f.cfg.Mounts = mounts(false)
		h := n.start(t, f)
		must.Eq(t, int32(0), waitTask(t, n, f, 30*time.Second).GetResult().GetExitCode())
		want := workerenv.EncodeMounts([]workerenv.Mount{
			{Destination: dest, HostPath: host},
			{Destination: "/mnt/data", HostPath: data, ReadOnly: true},
		})
		f.logs.waitFor(t, "storage="+filepath.Join(host, "results")+"\nmounts="+want, "")
		b, err := os.ReadFile(filepath.Join(host, "results", "mounted", "probe"))
		must.NoError(t, err)
		must.Eq(t, "written\n", string(b))
		_, err = os.Stat(dest)
		must.True(t, os.IsNotExist(err))
		n.destroy(t, h.GetConfig().GetId())
	})

	refusals := []struct {
		name, storage string
		mounts        []*drivers.Mount
		want          string
	}{
		{"storage on a read-only mount", dest + "/results", mounts(true), "read-only volume mounted at " + dest},
		{"storage climbing out of the mount", dest + "/../../../etc/cron.d", mounts(false), `holds a ".." element`},
		{"destination climbing out", dest + "/results",
			[]*drivers.Mount{{TaskPath: dest + "/../..", HostPath: host}}, `destination "` + dest + `/../.." holds a ".." element`},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			f := newTaskFixture(t, n, "worker", mountTask(tc.storage, `echo started; touch "$NOMAD_TRAIN_STORAGE_PATH/escaped"`))
			f.cfg.Mounts = tc.mounts
			mustRefuseForGood(t, startOrRun(t, n, f), tc.want)
			must.NoError(t, filepath.WalkDir(host, func(p string, _ os.DirEntry, err error) error {
				must.NotEq(t, "escaped", filepath.Base(p))
				return err
			}))
			f.logs.mu.Lock()
			must.False(t, strings.Contains(f.logs.stdout.String(), "started"))
			f.logs.mu.Unlock()
		})
	}
}
