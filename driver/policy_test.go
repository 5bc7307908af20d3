package driver

import (
	"fmt"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/driver/executor"
	"github.com/nomad-train/nomad-train/driver/proto/drivers"
	"github.com/nomad-train/nomad-train/trainer/external"
	"github.com/nomad-train/nomad-train/trainer/nn"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

// A key with "=" would reach the process as another variable than its
// name says (a job submitted as API JSON can send one; Nomad passes it
// on): GODEBUG=x509sha1 with the value 1 is GODEBUG, RANK=9 with "" is
// RANK. Each is refused, named.
func TestCheckTaskEnvRefusesKeysThatAreNoNames(t *testing.T) {
	for _, env := range []map[string]string{
		{"GODEBUG=x509sha1": "1"},
		{"GCONV_PATH=/alloc/task/local": ""},
		{"RANK=9": "", "PATH": "/bin"},
		{"MASTER_ADDR=evil.example": ""},
		{"": "x"},
		{"A\x00B": "x"},
	} {
		err := checkTaskEnv(env, noEnv)
		must.ErrorIs(t, err, ErrBadEnvName, must.Sprint(env))
		for k := range env {
			if k != "PATH" {
				must.ErrorContains(t, err, strconv.Quote(k))
			}
		}
	}
}

func TestCheckTaskEnv(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string // "" = accepted
	}{
		{"nomad's own and the job's", map[string]string{"NOMAD_ALLOC_INDEX": "0", "PATH": "/bin", "LD_LIBRARY_PATH": "/opt/cuda/lib64", "CONSUL_HTTP_TOKEN": "t"}, ""},
		{"tuning knobs", map[string]string{workerenv.StopGrace: "5s", workerenv.Fsync: "checkpoints", nn.BackendEnv: "openblas", workerenv.CollectiveTransport: "tcp"}, ""},
		{"the command of the wrapper", map[string]string{workerenv.ExternalCommand: `["/bin/sh"]`}, workerenv.ExternalCommand},
		{"held env", map[string]string{external.HeldEnv: `{}`}, external.HeldEnv},
		{"identity and trust", map[string]string{workerenv.SecretFile: "/etc/shadow", workerenv.MemberID: "x", workerenv.Builtin: "external"},
			"NOMAD_TRAIN_BUILTIN, NOMAD_TRAIN_MEMBER_ID, NOMAD_TRAIN_SECRET_FILE"},
		{"a variable the runtime may grow", map[string]string{"NOMAD_TRAIN_SOMETHING_NEW": "1"}, "NOMAD_TRAIN_SOMETHING_NEW"},
		{"torchrun's", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "1", "TORCHELASTIC_RUN_ID": "x"},
			"MASTER_PORT, RANK, TORCHELASTIC_RUN_ID, WORLD_SIZE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkTaskEnv(tc.env, noEnv)
			if tc.want == "" {
				must.NoError(t, err)
				return
			}
			must.ErrorIs(t, err, ErrReservedEnv)
			must.ErrorContains(t, err, ": "+tc.want+";")
		})
	}
}

// A tuning knob's value is checked as the worker would check it; values a
// Nomad client had yet to interpolate, and other variables, pass.
func TestCheckTaskSettings(t *testing.T) {
	must.NoError(t, checkTaskSettings(map[string]string{
		workerenv.StopGrace: "5s", workerenv.MetricsAddr: "${NOMAD_ADDR_metrics}", "PATH": "/bin", "NOMAD_TRAIN_BLAS": "anything"}))
	err := checkTaskSettings(map[string]string{workerenv.StallFactor: "0.5", workerenv.Fsync: "never", workerenv.StopGrace: "5s"})
	must.ErrorIs(t, err, ErrBadSetting)
	must.ErrorContains(t, err, `NOMAD_TRAIN_FSYNC="never"`)
	must.ErrorContains(t, err, `NOMAD_TRAIN_STALL_FACTOR="0.5" is not a number above 1`)
	// A megabyte of value is named, not echoed whole into the task's events.
	err = checkTaskSettings(map[string]string{workerenv.LeaseTTL: strings.Repeat("x", 1<<20)})
	must.ErrorContains(t, err, `NOMAD_TRAIN_LEASE_TTL="xxx`)
	must.Less(t, 400, len(err.Error()))
}

// noEnv is a driver started with no environment.
func noEnv(string) (string, bool) { return "", false }

// A reserved variable the client agent itself was started with reaches
// every task (Nomad hands a driver without isolation the agent's
// environment): the refusal says to fix the agent, not the job.
func TestCheckTaskEnvFromTheAgent(t *testing.T) {
	agent := func(k string) (string, bool) {
		if k == workerenv.StoragePath {
			return "/srv/runs", true
		}
		return "", false
	}
	err := checkTaskEnv(map[string]string{workerenv.StoragePath: "/srv/runs", workerenv.MemberID: "x", "PATH": "/bin"}, agent)
	must.ErrorIs(t, err, ErrReservedEnv)
	must.ErrorContains(t, err, ": "+workerenv.MemberID+"; remove them from the job")
	must.ErrorContains(t, err, "; and "+workerenv.StoragePath+" set in the Nomad client agent's own environment")
	// The same name with another value is the job's.
	err = checkTaskEnv(map[string]string{workerenv.StoragePath: "/elsewhere"}, agent)
	must.ErrorContains(t, err, ": "+workerenv.StoragePath+"; remove them from the job")
}

// The driver binary gets none of the job's loader variables; the command
// it wraps gets them all, and the driver's own values always win.
func TestWorkerEnvWithholdsLoaderEnvFromSelf(t *testing.T) {
	job := map[string]string{
		"LD_PRELOAD": "/task/local/x.so", "LD_LIBRARY_PATH": "/opt/cuda", "GODEBUG": "x509sha1=1", "GCONV_PATH": "/task",
		"GLIBC_TUNABLES": "a=1", "GOMAXPROCS": "4", "PATH": "/bin", workerenv.RunName: "not-the-run",
	}
	tc := &drivers.TaskConfig{Name: "w", AllocId: "a", Env: job, DeviceEnv: map[string]string{"LD_AUDIT": "/x.so"}}
	cfg := TaskConfig{RunName: "r", WorldSize: 1}
	asMap := func(env []string) map[string]string {
		m := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name     string
		in       envInput
		wantLD   bool   // LD_PRELOAD reaches the process
		wantHeld string // the HeldEnv the wrapper gets
	}{
		{"the job's own program", envInput{Task: tc, Config: cfg}, true, ""},
		{"a builtin worker", envInput{Task: tc, Config: cfg, Process: workerenv.Process{Self: true}}, false, ""},
		{"the wrapper of a command", envInput{Task: tc, Config: cfg, Process: workerenv.Process{Self: true, External: []string{"/bin/prog"}}}, false,
			`{"GCONV_PATH":"/task","GLIBC_TUNABLES":"a=1","GODEBUG":"x509sha1=1","LD_AUDIT":"/x.so","LD_LIBRARY_PATH":"/opt/cuda","LD_PRELOAD":"/task/local/x.so"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := asMap(workerEnv(c.in))
			_, ld := env["LD_PRELOAD"]
			must.Eq(t, c.wantLD, ld)
			for _, k := range []string{"LD_LIBRARY_PATH", "GODEBUG", "GCONV_PATH", "GLIBC_TUNABLES", "LD_AUDIT"} {
				_, ok := env[k]
				must.Eq(t, c.wantLD, ok, must.Sprint(k))
			}
			must.Eq(t, "4", env["GOMAXPROCS"])
			must.Eq(t, "/bin", env["PATH"])
			must.Eq(t, "r", env[workerenv.RunName])
			must.Eq(t, c.wantHeld, env[external.HeldEnv])
		})
	}
	must.Eq(t, []string{"GCONV_PATH", "GLIBC_TUNABLES", "GODEBUG", "LD_AUDIT", "LD_LIBRARY_PATH", "LD_PRELOAD"}, withheldIn(tc))
}

// fakeUsers is a user database: root (0), toor (another name for 0),
// trainer (1000).
func fakeUsers(name string) (*user.User, error) {
	for _, u := range []user.User{{Username: "root", Uid: "0"}, {Username: "toor", Uid: "0"}, {Username: "trainer", Uid: "1000"}} {
		if u.Username == name || u.Uid == name {
			return &u, nil
		}
	}
	return nil, user.UnknownUserError(name)
}

func TestCheckUser(t *testing.T) {
	cases := []struct {
		user   string
		denied []string
		want   string // "" = allowed
	}{
		{"", []string{"root"}, ""}, // the agent's own user: the operator's choice
		{"trainer", []string{"root"}, ""},
		{"root", []string{"root"}, `user "root"`},
		{"0", []string{"root"}, `user "0" (uid 0, as "root")`},
		{"toor", []string{"root"}, `user "toor" (uid 0, as "root")`},
		{"root", []string{"0"}, `user "root" (uid 0, as "0")`},
		{"1000", []string{"trainer"}, `user "1000"`},
		{"root", nil, ""},
		{"nosuchuser", []string{"root"}, ""}, // the executor says it is unknown
		{"nosuchuser", []string{"nosuchuser"}, `user "nosuchuser"`},
		{"01234", []string{"1234"}, `user "01234" (uid 1234, as "1234")`}, // in no user database
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s in %v", tc.user, tc.denied), func(t *testing.T) {
			err := checkUser(tc.user, tc.denied, fakeUsers)
			if tc.want == "" {
				must.NoError(t, err)
				return
			}
			must.ErrorIs(t, err, ErrDeniedUser)
			must.ErrorContains(t, err, tc.want)
		})
	}
}

// The node's own user database: every spelling of uid 0 is root.
func TestCheckUserOnThisNode(t *testing.T) {
	for _, name := range []string{"root", "0", "00", "+0"} {
		t.Run(name, func(t *testing.T) {
			must.ErrorIs(t, checkUser(name, []string{"root"}, executor.LookupUser), ErrDeniedUser)
		})
	}
}

func TestDecodePluginConfigDeniedUsers(t *testing.T) {
	cases := []struct {
		name string
		in   map[string]any
		want []string
		err  string
	}{
		{"default denies root", map[string]any{}, []string{"root"}, ""},
		{"none", map[string]any{"denied_users": []any{}}, nil, ""},
		{"more", map[string]any{"denied_users": []any{"root", "admin"}, "default_user": "nobody"}, []string{"root", "admin"}, ""},
		{"default_user denied", map[string]any{"default_user": "root"}, nil, `default_user "root" is in denied_users`},
		{"default_user denied by uid", map[string]any{"default_user": "0"}, nil, `default_user "0" is in denied_users`},
		{"default_user allowed when root is", map[string]any{"default_user": "root", "denied_users": []any{}}, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodePluginConfig(mustEncodeTaskConfig(t, tc.in))
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				return
			}
			must.NoError(t, err)
			must.Eq(t, tc.want, c.DeniedUsers)
		})
	}
}

// What nomad-train compile puts in a task's env passes the driver's check:
// every example, with every runtime knob a spec may set.
func TestCompiledJobsPassTheEnvCheck(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "examples", "*", "train.hcl"))
	must.NoError(t, err)
	must.SliceNotEmpty(t, paths)
	for _, path := range paths {
		t.Run(filepath.Base(filepath.Dir(path)), func(t *testing.T) {
			spec, diags := trainspec.ParseFile(path, trainspec.ParseOptions{})
			must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
			if spec.Env == nil {
				spec.Env = map[string]string{}
			}
			for _, k := range []string{"NOMAD_TRAIN_BLAS", "NOMAD_TRAIN_LOG_LEVEL", "NOMAD_TRAIN_COLLECTIVE_TRANSPORT", "NOMAD_TRAIN_FSYNC"} {
				spec.Env[k] = "x"
			}
			job, diags := trainspec.Compile(spec)
			must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
			for _, g := range job.TaskGroups {
				for _, task := range g.Tasks {
					must.NoError(t, checkTaskEnv(task.Env, noEnv), must.Sprintf("task %s", task.Name))
				}
			}
		})
	}
}
