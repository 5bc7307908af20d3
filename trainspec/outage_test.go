package trainspec

import (
	"fmt"
	"testing"
	"time"

	"github.com/shoenig/test/must"
)

// rendezvous { consul_outage_grace } reaches the driver's task config only
// when set (the workers' default applies otherwise), and a bad value is a
// diagnostic at the attribute.
func TestConsulOutageGrace(t *testing.T) {
	const src = `train "g" {
  entrypoint { builtin = "quickstart" }
  rendezvous { consul_outage_grace = %s }
  run { storage_path = "/r" }
}`
	rdzv := func(t *testing.T, grace string) map[string]any {
		t.Helper()
		job, _ := mustCompile(t, fmt.Sprintf(src, grace))
		return job.TaskGroups[0].Tasks[0].Config["rendezvous"].([]map[string]any)[0]
	}
	got := rdzv(t, `"30s"`)
	must.Eq(t, "30s", got["consul_outage_grace"])
	spec := mustParse(t, fmt.Sprintf(src, `"45s"`), ParseOptions{})
	must.Eq(t, 45*time.Second, spec.Rendezvous.ConsulOutageGrace)

	job, _ := mustCompile(t, `train "g" {
  entrypoint { builtin = "quickstart" }
  run { storage_path = "/r" }
}`)
	_, set := job.TaskGroups[0].Tasks[0].Config["rendezvous"].([]map[string]any)[0]["consul_outage_grace"]
	must.False(t, set, must.Sprint("the default is the workers'"))

	for _, bad := range []string{`"soon"`, `"-5s"`} {
		_, diags := Parse([]byte(fmt.Sprintf(src, bad)), "train.hcl", ParseOptions{})
		must.True(t, diags.HasErrors())
		must.StrContains(t, diagLines(diags)[0], "train.hcl:3:38")
		must.StrContains(t, diagLines(diags)[0], "consul_outage_grace")
	}
}
