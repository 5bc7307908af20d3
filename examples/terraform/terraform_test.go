// Package terraform_test checks examples/terraform/main.tf with the
// terraform CLI: formatted, valid against the providers' schemas, and,
// against a Nomad agent (NOMAD_ADDR), applied and destroyed.
package terraform_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/shoenig/test/must"

	"github.com/nomad-train/nomad-train/trainspec"
)

// pluginDirEnv names a directory of provider binaries laid out for
// terraform init -plugin-dir (registry.terraform.io/hashicorp/nomad/<v>/<os>_<arch>/...),
// for machines that cannot reach the Terraform registry.
const pluginDirEnv = "NOMAD_TRAIN_TF_PLUGIN_DIR"

// workdir copies main.tf into a fresh directory with job.json compiled from
// the quickstart example under run name name, and returns it.
func workdir(t *testing.T, name string) string {
	t.Helper()
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Skip("terraform is not on PATH: skipping the Terraform example's checks")
	}
	dir := t.TempDir()
	tf, err := os.ReadFile("main.tf")
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf"), tf, 0o644))
	spec, diags := trainspec.ParseFile(filepath.Join("..", "quickstart", "train.hcl"), trainspec.ParseOptions{})
	must.False(t, diags.HasErrors(), must.Sprint(diags.Error()))
	spec.Name = name
	job, _ := trainspec.Compile(spec)
	js, err := trainspec.RenderJSON(job)
	must.NoError(t, err)
	must.NoError(t, os.WriteFile(filepath.Join(dir, "job.json"), js, 0o644))
	return dir
}

// terraform runs the CLI in dir and returns its output.
func terraform(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "terraform", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// initProviders installs the providers, from pluginDirEnv when set; it
// skips the test when the registry cannot be reached and no plugin
// directory was given.
func initProviders(t *testing.T, dir string) {
	t.Helper()
	args := []string{"init", "-backend=false", "-no-color"}
	pluginDir := os.Getenv(pluginDirEnv)
	if pluginDir != "" {
		args = append(args, "-plugin-dir="+pluginDir)
	}
	out, err := terraform(t, dir, args...)
	if err != nil && pluginDir == "" && (strings.Contains(out, "registry.terraform.io") || strings.Contains(out, "Failed to query available provider packages")) {
		t.Skipf("terraform init cannot reach the provider registry; set %s to a directory of provider binaries: %s", pluginDirEnv, errorLine(out))
	}
	must.NoError(t, err, must.Sprint(out))
}

// errorLine is the first line of terraform's output that names an error.
func errorLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "Error:"); i >= 0 {
			return strings.TrimSpace(l[i:])
		}
	}
	return strings.TrimSpace(out)
}

// The example is formatted (no providers needed) and valid against the
// Nomad and random providers' schemas.
func TestTerraformValidate(t *testing.T) {
	dir := workdir(t, "quickstart")
	out, err := terraform(t, dir, "fmt", "-check", "-diff", "-no-color")
	must.NoError(t, err, must.Sprint("main.tf is not formatted:\n", out))
	initProviders(t, dir)
	out, err = terraform(t, dir, "validate", "-no-color")
	must.NoError(t, err, must.Sprint(out))
	must.StrContains(t, out, "The configuration is valid")
}

// Against a Nomad agent (NOMAD_ADDR), apply stores the run secret in the
// job's Variable and registers the job; destroy removes both.
func TestTerraformApply(t *testing.T) {
	if os.Getenv("NOMAD_ADDR") == "" {
		t.Skip("NOMAD_ADDR is not set: skipping terraform apply against a Nomad agent")
	}
	name := "tf-quickstart-" + strings.ToLower(strings.ReplaceAll(time.Now().UTC().Format("150405.000"), ".", ""))
	dir := workdir(t, name)
	initProviders(t, dir)
	client, err := api.NewClient(api.DefaultConfig())
	must.NoError(t, err)
	t.Cleanup(func() {
		if out, err := terraform(t, dir, "destroy", "-auto-approve", "-no-color"); err != nil {
			t.Errorf("terraform destroy: %v\n%s", err, out)
		}
		client.Jobs().Deregister(name, true, nil)
	})
	out, err := terraform(t, dir, "apply", "-auto-approve", "-no-color")
	must.NoError(t, err, must.Sprint(out))

	v, _, err := client.Variables().Read(trainspec.SecretVariablePath(name), nil)
	must.NoError(t, err)
	must.Eq(t, 64, len(v.Items[trainspec.SecretItem]))
	job, _, err := client.Jobs().Info(name, nil)
	must.NoError(t, err)
	must.Eq(t, name, *job.ID)
	must.Eq(t, "train", job.TaskGroups[0].Tasks[0].Driver)
}
