package console

import (
	"testing"
	"time"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

func TestSummaryRender(t *testing.T) {
	cases := []struct {
		name string
		s    Summary
		want string
	}{
		{"run", Summary{Kind: "run", Name: "quickstart", Wall: 12340 * time.Millisecond, Steps: 20,
			Restarts: 1, Failures: 1, MaxFailures: 2, Best: "results/quickstart/checkpoint_000019", Score: "loss=0.0135",
			Storage: "./results"}, `==> summary of run "quickstart"
    wall time        12.3s
    steps            20 (1.62/s)
    restarts         1 (failures used: 1 of 2)
    best checkpoint  results/quickstart/checkpoint_000019 (loss=0.0135)
    curves           nomad-train dashboard ./results, then http://127.0.0.1:8265/#/run?key=quickstart
`},
		{"unlimited budget, no checkpoint, odd storage", Summary{Kind: "run", Name: "a b", Wall: 2 * time.Second, Steps: 300,
			MaxFailures: -1, Storage: "/data/my runs"}, `==> summary of run "a b"
    wall time  2s
    steps      300 (150/s)
    restarts   0 (failures used: 0 of unlimited)
    curves     nomad-train dashboard '/data/my runs', then http://127.0.0.1:8265/#/run?key=a+b
`},
		{"experiment", Summary{Kind: "experiment", Name: "sweep", Wall: time.Minute, Unit: "trial reports", Steps: 90,
			Trials: 6, FailedTrials: 1, Best: "results/sweep/trial_0003/checkpoint_000004", Score: "loss=0.02, trial trial_0003",
			Storage: "s3://bucket/exp"}, `==> summary of experiment "sweep"
    wall time        1m0s
    trial reports    90 (1.50/s)
    trials           6 (1 failed)
    best checkpoint  results/sweep/trial_0003/checkpoint_000004 (loss=0.02, trial trial_0003)
    curves           nomad-train dashboard s3://bucket/exp, then http://127.0.0.1:8265/#/exp?key=sweep
`},
		{"storage block options", Summary{Kind: "run", Name: "qs", Wall: time.Second, Steps: 2, MaxFailures: 0,
			Storage: "s3://bkt/runs", StorageOptions: workerenv.StorageOptions{Endpoint: "http://127.0.0.1:7070", Region: "us-east-1", PathStyle: true}},
			`==> summary of run "qs"
    wall time  1s
    steps      2 (2.00/s)
    restarts   0 (failures used: 0 of 0)
    curves     nomad-train dashboard -s3-endpoint http://127.0.0.1:7070 -s3-region us-east-1 -s3-path-style s3://bkt/runs, then http://127.0.0.1:8265/#/run?key=qs
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			must.Eq(t, c.want, c.s.Render())
		})
	}
}
