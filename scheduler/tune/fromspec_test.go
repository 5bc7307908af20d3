package tune

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainspec"
)

// A tune block's stop map, stop_on_plateau, time_attr and fail_fast
// reach the tuner's Config as written.
func TestFromSpecStopPlateauAndFailFast(t *testing.T) {
	spec, diags := trainspec.Parse([]byte(`
train "x" {
  entrypoint { builtin = "quickstart" }
  config = { lr = uniform(0.01, 0.1) }
  tune {
    metric    = "loss"
    mode      = "min"
    time_attr = "time_total_s"
    fail_fast = true
    stop      = { time_total_s = 600, loss = { at_most = 0.05 } }
    stop_on_plateau {
      std = 0.001
    }
  }
}
`), "train.hcl", trainspec.ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	x, err := FromSpec(spec)
	must.NoError(t, err)
	must.EqOp(t, TimeTotal, x.Config.TimeAttr)
	must.True(t, x.Config.FailFast)
	must.Eq(t, []StopCriterion{{Metric: "loss", Value: 0.05, AtMost: true}, {Metric: TimeTotal, Value: 600}}, x.Config.Stop)
	must.Eq(t, &PlateauStop{Metric: "loss", Std: 0.001, NumResults: 4, GracePeriod: 4}, x.Config.Plateau)
}
