package contextd

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the daemon's Prometheus series (docs/contextd.md, "Metrics").
type metrics struct {
	reg          *prometheus.Registry
	publications *prometheus.CounterVec
	rejections   *prometheus.CounterVec
	applied      prometheus.Counter
}

func newMetrics(d *Daemon) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	node := prometheus.Labels{"node": d.cfg.Name}
	m.publications = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "theseus_contextd_publications_total",
		Help: "Publications accepted through this node's API, by kind (attr, sched, value).", ConstLabels: node}, []string{"kind"})
	m.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "theseus_contextd_rejections_total",
		Help: "Requests rejected by this node, by reason (the API's Error.Reason; invalid_log_entry: a log entry the materialiser skipped).", ConstLabels: node}, []string{"reason"})
	m.applied = prometheus.NewCounter(prometheus.CounterOpts{Name: "theseus_contextd_applied_entries_total",
		Help: "Log entries this node's materialiser has applied since it started.", ConstLabels: node})
	seq := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "theseus_contextd_applied_sequence",
		Help: "Sequence of the last log entry applied to this node's context directories.", ConstLabels: node},
		func() float64 { return float64(d.Applied()) })
	last := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "theseus_contextd_log_last_sequence",
		Help: "The replicated log's last sequence, as its leader reports it (0 when unreachable).", ConstLabels: node},
		func() float64 { return float64(d.logLast(context.Background())) })
	lag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "theseus_contextd_lag",
		Help: "Log entries not yet applied on this node (log_last_sequence - applied_sequence).", ConstLabels: node},
		func() float64 {
			l, a := d.logLast(context.Background()), d.Applied()
			if l < a {
				return 0
			}
			return float64(l - a)
		})
	m.reg.MustRegister(m.publications, m.rejections, m.applied, seq, last, lag)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Timeout: 5 * time.Second})
}
