package builtins

import (
	"testing"

	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// Each builtin's config is checked as its workers decode it.
func TestCheckConfig(t *testing.T) {
	must.NoError(t, CheckConfig("quickstart", []byte(`{"lr":0.1,"epochs":3}`)))
	must.NoError(t, CheckConfig("mnist-cnn", []byte(`{"lr":0.002,"channels":16,"data_dir":"/data"}`)))
	must.NoError(t, CheckConfig("quickstart", nil))

	err := CheckConfig("quickstart", []byte(`{"learning_rate":0.1}`))
	must.ErrorContains(t, err, `unknown field "learning_rate"`)
	must.ErrorContains(t, err, "its settings: lr, momentum, epochs, batch_size, samples, noise, seed")
	must.ErrorContains(t, CheckConfig("mnist-mlp", []byte(`{"epochs":"three"}`)), "cannot unmarshal string")

	// A command's config is the command's business.
	must.NoError(t, CheckConfig(workerenv.ExternalBuiltin, []byte(`{"anything":1}`)))
	for _, name := range Names() {
		if name != workerenv.ExternalBuiltin {
			must.MapContainsKey(t, configs, name, must.Sprintf("builtin %s has no config to check", name))
		}
	}
}
