package httpapi

import (
	"context"
	"math"
	"net/http"
	"strconv"

	"github.com/quittance/quittance/ledger/report"
)

// The headers of an answer with reads that tolerate lag (ledger/DESIGN.md
// §7, reads from the standby): where they were served from, and how many
// seconds behind the primary the data was (0 on the primary).
const (
	HeaderReadFrom = "Quittance-Read-From"
	HeaderDataAge  = "Quittance-Data-Age"
)

// ReadConsistency is the query parameter of the operations that may be
// served from the standby; withReadFreshness reads it.
type ReadConsistency struct {
	Consistency string `query:"consistency" enum:"strong" doc:"strong: read from the primary, never from the standby (QUITTANCE_READ_DATABASE_URL), so the answer includes every write acknowledged before it. Without it the answer may come from the standby, as old as its Quittance-Data-Age header says."`
}

// consistencyDoc is appended to the description of every operation that
// may be served from the standby.
const consistencyDoc = " May be served from the standby: the Quittance-Read-From header says standby or primary, " +
	"Quittance-Data-Age how many seconds behind the primary its data was; consistency=strong reads the primary."

// withReadFreshness sets up a request's reads (report.WithRead, asking for
// the primary on consistency=strong) and has its answer stamped with where
// they were served from, before its first byte. The middleware calls it on
// the request the mux then sees, so that the route the mux matches stays
// on that request for the metrics.
func withReadFreshness(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request) {
	ctx := report.WithRead(r.Context(), r.URL.Query().Get("consistency") == "strong")
	return &freshnessWriter{ResponseWriter: w, ctx: ctx}, r.WithContext(ctx)
}

// freshnessWriter adds the freshness headers when the answer starts.
type freshnessWriter struct {
	http.ResponseWriter
	ctx     context.Context
	stamped bool
}

func (w *freshnessWriter) stamp() {
	if w.stamped {
		return
	}
	w.stamped = true
	f, ok := report.ReadFreshness(w.ctx)
	if !ok {
		return
	}
	h := w.Header()
	if !f.Standby {
		h.Set(HeaderReadFrom, "primary")
		h.Set(HeaderDataAge, "0")
		return
	}
	h.Set(HeaderReadFrom, "standby")
	h.Set(HeaderDataAge, strconv.FormatFloat(math.Round(f.Age.Seconds()*1000)/1000, 'f', -1, 64))
}

func (w *freshnessWriter) WriteHeader(code int) {
	w.stamp()
	w.ResponseWriter.WriteHeader(code)
}

func (w *freshnessWriter) Write(b []byte) (int, error) {
	w.stamp()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *freshnessWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher (streamed exports, event streams).
func (w *freshnessWriter) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}
