package workerenv

import (
	"testing"

	"github.com/shoenig/test/must"
)

// env is a getenv over a map.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestLoadCollectiveTransport(t *testing.T) {
	base := func(transport string) map[string]string {
		return map[string]string{RunName: "r", StoragePath: t.TempDir(), CollectiveTransport: transport}
	}
	for _, tc := range []struct {
		value string
		want  bool
	}{{"", false}, {"auto", false}, {"shm", false}, {"tcp", true}, {"TCP", true}} {
		t.Run(tc.value, func(t *testing.T) {
			e, err := Load(env(base(tc.value)))
			must.NoError(t, err)
			must.EqOp(t, tc.want, e.CollectiveTCPOnly)
		})
	}
	t.Run("a bad value names the variable", func(t *testing.T) {
		_, err := Load(env(base("udp")))
		must.ErrorContains(t, err, CollectiveTransport)
	})
}

func TestLoadFsync(t *testing.T) {
	for value, want := range map[string]bool{"": false, "records": false, "checkpoints": true} {
		e, err := Load(env(map[string]string{RunName: "r", StoragePath: "s", Fsync: value}))
		must.NoError(t, err)
		must.Eq(t, want, e.FsyncCheckpointsOnly)
	}
	_, err := Load(env(map[string]string{RunName: "r", StoragePath: "s", Fsync: "never"}))
	must.ErrorContains(t, err, Fsync)
}

func TestLoadTorchPort(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int
		err   bool
	}{
		{"", 0, false},
		{"23456", 23456, false},
		{" 1 ", 1, false},
		{"0", 0, true},
		{"65536", 0, true},
		{"${NOMAD_PORT_torch}", 0, true}, // not interpolated: not a Nomad task
		{"-5", 0, true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			e, err := Load(env(map[string]string{RunName: "r", StoragePath: "s", TorchPort: tc.value}))
			if tc.err {
				must.ErrorContains(t, err, TorchPort)
				return
			}
			must.NoError(t, err)
			must.EqOp(t, tc.want, e.TorchPort)
		})
	}
}

func TestLoadMetricsAddr(t *testing.T) {
	for _, tc := range []struct {
		value, want, err string
	}{
		{"", "", ""},
		{"off", "", ""},
		{"127.0.0.1:0", "127.0.0.1:0", ""},
		{"10.0.0.7:25631", "10.0.0.7:25631", ""},
		{" :9400 ", ":9400", ""},
		{"9400", "", "not host:port"},
		{"127.0.0.1:http", "", "is not a number"},
		{"127.0.0.1:70000", "", "is not a number"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			e, err := Load(env(map[string]string{RunName: "r", StoragePath: "s", MetricsAddr: tc.value}))
			if tc.err != "" {
				must.ErrorContains(t, err, tc.err)
				must.ErrorContains(t, err, MetricsAddr)
				return
			}
			must.NoError(t, err)
			must.EqOp(t, tc.want, e.MetricsAddr)
		})
	}
}

// CheckSetting gives Load's error for a tuning variable's bad value, and
// nothing for good values, for interpolations only a Nomad client
// resolves, or for variables that are not Load's tuning settings.
func TestCheckSetting(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{StorageOutageGrace, "soon", `NOMAD_TRAIN_STORAGE_OUTAGE_GRACE="soon" is not a positive duration`},
		{StorageOutageGrace, "0s", "not a positive duration"},
		{Fsync, "never", "want records or checkpoints"},
		{StallFactor, "0.5", "is not a number above 1"},
		{StorageOutageGrace, "5m", ""},
		{StorageStallTimeout, "-1s", `NOMAD_TRAIN_STORAGE_STALL_TIMEOUT="-1s" is not a positive duration`},
		{StorageStallTimeout, "2m", ""},
		{MetricsAddr, "${NOMAD_ADDR_metrics}", ""},
		{"NOMAD_TRAIN_BLAS", "anything", ""}, // the nn package's to read
		{RunName, "", ""},                    // not a tuning setting: Reserved refuses it
		{"PATH", "/bin", ""},
	} {
		err := CheckSetting(tc.name, tc.value)
		if tc.want == "" {
			must.NoError(t, err, must.Sprint(tc.name))
			continue
		}
		must.ErrorContains(t, err, tc.want)
	}
}
