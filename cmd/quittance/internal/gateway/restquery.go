package gateway

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// a2a-go v2.3.1's HTTP+JSON server drops two of ListTasks' query
// parameters (GET /tasks): it reads statusTimestampAfter and historyLength
// into pointer fields it cannot fill, and says nothing. Its client, for
// its part, sends statusTimestampAfter as lastUpdatedAfter, to the second.
// The gateway reads them from the query itself, before the SDK's handler:
// statusTimestampAfter (RFC 3339, fractions of a second kept), or
// lastUpdatedAfter when it is absent, and historyLength.

// listQuery is what the gateway read of a GET /tasks query.
type listQuery struct {
	statusAfter   *time.Time
	historyLength *int
	err           error
}

type listQueryKey struct{}

// withListQuery carries a GET /tasks request's statusTimestampAfter and
// historyLength in its context for ListTasks; path is the request's path
// below the binding's prefix.
func withListQuery(r *http.Request, path string) *http.Request {
	if r.Method != http.MethodGet || !strings.HasSuffix(path, "/tasks") {
		return r
	}
	q := r.URL.Query()
	var lq listQuery
	raw := q.Get("statusTimestampAfter")
	if raw == "" {
		raw = q.Get("lastUpdatedAfter")
	}
	if raw != "" {
		at, err := time.Parse(time.RFC3339Nano, raw)
		if err != nil {
			lq.err = a2a.NewError(a2a.ErrInvalidParams, "statusTimestampAfter is not an RFC 3339 timestamp")
		}
		lq.statusAfter = &at
	}
	if raw := q.Get("historyLength"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil {
			lq.err = a2a.NewError(a2a.ErrInvalidParams, "historyLength is not an integer")
		}
		lq.historyLength = &n
	}
	return r.WithContext(context.WithValue(r.Context(), listQueryKey{}, lq))
}

// restListQuery fills req's statusTimestampAfter and historyLength from
// the HTTP+JSON query when the SDK left them out.
func restListQuery(ctx context.Context, req *a2a.ListTasksRequest) error {
	lq, ok := ctx.Value(listQueryKey{}).(listQuery)
	if !ok {
		return nil
	}
	if lq.err != nil {
		return lq.err
	}
	if req.StatusTimestampAfter == nil {
		req.StatusTimestampAfter = lq.statusAfter
	}
	if req.HistoryLength == nil {
		req.HistoryLength = lq.historyLength
	}
	return nil
}
