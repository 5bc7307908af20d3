package builtins

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Each builtin's config is checked as its workers decode it.
func TestCheckConfig(t *testing.T) {
	must.NoError(t, CheckConfig("quickstart", []byte(`{"lr":0.1,"epochs":3}`), 0, 0))
	must.NoError(t, CheckConfig("mnist-cnn", []byte(`{"lr":0.002,"channels":16,"data_dir":"/data"}`), 0, 0))
	must.NoError(t, CheckConfig("quickstart", nil, 0, 0))

	err := CheckConfig("quickstart", []byte(`{"learning_rate":0.1}`), 0, 0)
	must.ErrorContains(t, err, `unknown field "learning_rate"`)
	must.ErrorContains(t, err, "its settings: lr, momentum, epochs, batch_size, samples, noise, seed")
	must.ErrorContains(t, CheckConfig("mnist-mlp", []byte(`{"epochs":"three"}`), 0, 0), "cannot unmarshal string")

	// The gang's sizes: a global batch must split over each (the default
	// batch of 32 over 3 workers does not; over 2 to 4, 3 is among them).
	must.NoError(t, CheckConfig("quickstart", []byte(`{"epochs":3}`), 4, 4))
	must.ErrorContains(t, CheckConfig("quickstart", []byte(`{"epochs":3}`), 3, 3), "batch_size 32 does not split evenly over 3 workers")
	must.ErrorContains(t, CheckConfig("quickstart", []byte(`{"batch_size":64}`), 2, 4), "make it a multiple of 12")
	must.ErrorContains(t, CheckConfig("mnist-mlp", []byte(`{"batch_size":0}`), 1, 1), "batch_size must be at least 1")
	must.NoError(t, CheckConfig("mnist-cnn", []byte(`{"batch_size":48}`), 2, 4))

	// A command's config is the command's business.
	must.NoError(t, CheckConfig(workerenv.ExternalBuiltin, []byte(`{"anything":1}`), 0, 0))
	for _, name := range Names() {
		if name != workerenv.ExternalBuiltin {
			must.MapContainsKey(t, configs, name, must.Sprintf("builtin %s has no config to check", name))
		}
	}
}
