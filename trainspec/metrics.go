package trainspec

import (
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-train/nomad-train/trainer/workerenv"
)

// MetricsTags are the tags of a run's metrics service. A Prometheus
// consul_sd_configs (or nomad_sd_configs) job keeps the targets tagged
// "prometheus" and reads the path from the "metrics_path=" tag (see
// examples/prometheus/prometheus.yml for the relabelling).
func MetricsTags(run string) []string {
	return []string{"prometheus", "metrics_path=" + workerenv.MetricsPath, "nomad-train", "run=" + run}
}

// metricsServiceSuffix ends the name of a run's metrics service.
const metricsServiceSuffix = "-metrics"

// metricsService registers every worker's metrics port as "<run>-metrics"
// (a long run name cut so that the name stays a DNS label; the run= tag
// holds it whole), checked by an HTTP GET of the metrics path, so
// Prometheus scrapes only workers that serve.
func metricsService(run, provider string) *api.Service {
	name := serviceLabel(run)
	if room := maxLabel - len(metricsServiceSuffix); len(name) > room {
		name = strings.TrimRight(name[:room], "-")
	}
	return &api.Service{
		Name:      name + metricsServiceSuffix,
		PortLabel: MetricsPortLabel,
		Provider:  provider,
		Tags:      MetricsTags(run),
		Checks: []api.ServiceCheck{{
			Name:      "metrics",
			Type:      "http",
			Path:      workerenv.MetricsPath,
			PortLabel: MetricsPortLabel,
			Interval:  checkInterval,
			Timeout:   checkTimeout,
		}},
	}
}
