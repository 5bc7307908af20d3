// Package prometheus_test checks the Prometheus scrape config and the
// Grafana dashboard in this directory against what nomad-train really
// registers and serves.
package prometheus_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/shoenig/test/must"
	"go.yaml.in/yaml/v2"

	"github.com/nomad-train/nomad-train/trainer"
	"github.com/nomad-train/nomad-train/trainer/workerenv"
	"github.com/nomad-train/nomad-train/trainspec"
)

type relabel struct {
	SourceLabels []string `yaml:"source_labels"`
	Regex        string   `yaml:"regex"`
	TargetLabel  string   `yaml:"target_label"`
	Action       string   `yaml:"action"`
}

type scrapeConfig struct {
	JobName  string    `yaml:"job_name"`
	Relabels []relabel `yaml:"relabel_configs"`
}

// apply runs the relabel rules over labels as Prometheus does (regexes
// anchored at both ends, "replace" with $1 by default); false when a keep
// rule drops the target.
func apply(t *testing.T, rules []relabel, labels map[string]string) bool {
	for _, r := range rules {
		var vals []string
		for _, s := range r.SourceLabels {
			vals = append(vals, labels[s])
		}
		re := regexp.MustCompile("^(?:" + r.Regex + ")$")
		v := strings.Join(vals, ";")
		switch r.Action {
		case "keep":
			if !re.MatchString(v) {
				return false
			}
		case "", "replace":
			if m := re.FindStringSubmatch(v); m != nil {
				if len(m) > 1 {
					labels[r.TargetLabel] = m[1]
				} else {
					labels[r.TargetLabel] = v
				}
			}
		default:
			t.Fatalf("action %q not modelled", r.Action)
		}
	}
	return true
}

// The scrape jobs keep a compiled run's metrics services, scrape the path
// the workers serve, and label the series with the run; they drop other
// services tagged "prometheus".
func TestScrapeConfigMatchesCompiledTags(t *testing.T) {
	b, err := os.ReadFile("prometheus.yml")
	must.NoError(t, err)
	var cfg struct {
		Scrape []scrapeConfig `yaml:"scrape_configs"`
	}
	must.NoError(t, yaml.Unmarshal(b, &cfg))
	jobs := map[string]string{"nomad-train": "__meta_consul_tags", "nomad-train-nomad-sd": "__meta_nomad_tags"}
	for _, sc := range cfg.Scrape {
		tagsLabel, ok := jobs[sc.JobName]
		if !ok {
			continue
		}
		delete(jobs, sc.JobName)
		t.Run(sc.JobName, func(t *testing.T) {
			// Both discoveries join a service's tags with commas, with a
			// comma at each end.
			tags := "," + strings.Join(trainspec.MetricsTags("my-run"), ",") + ","
			labels := map[string]string{tagsLabel: tags}
			must.True(t, apply(t, sc.Relabels, labels))
			must.EqOp(t, workerenv.MetricsPath, labels["__metrics_path__"])
			must.EqOp(t, "my-run", labels["run"])
			must.False(t, apply(t, sc.Relabels, map[string]string{tagsLabel: ",prometheus,metrics_path=/x,"}))
		})
	}
	must.MapEmpty(t, jobs)
}

// Every series the dashboard queries is one a worker serves, and it has
// the panels the README promises.
func TestDashboardQueriesServedMetrics(t *testing.T) {
	b, err := os.ReadFile("grafana-dashboard.json")
	must.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	must.NoError(t, json.Unmarshal(b, &dash))
	served := []string{trainer.MetricStep, trainer.MetricStepsTotal, trainer.MetricReported, trainer.MetricGeneration,
		trainer.MetricRestarts, trainer.MetricAllReduceSeconds + "_bucket", trainer.MetricCommitSeconds + "_bucket"}
	name := regexp.MustCompile(`nomad_train_[a-z_]+`)
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			for _, n := range name.FindAllString(tg.Expr, -1) {
				must.SliceContains(t, served, n, must.Sprintf("panel %q", p.Title))
			}
		}
	}
	all := strings.Join(exprs, "\n")
	for _, want := range []string{`name="loss"`, "rate(" + trainer.MetricStepsTotal, "histogram_quantile(0.5, sum by (run, le) (rate(" + trainer.MetricAllReduceSeconds,
		"histogram_quantile(0.99, sum by (run, le) (rate(" + trainer.MetricAllReduceSeconds, trainer.MetricGeneration} {
		must.StrContains(t, all, want)
	}
	titles := ""
	for _, p := range dash.Panels {
		titles += p.Title + "\n"
	}
	must.StrContains(t, titles, "Loss")
}
