package gateway_test

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// TestGatewayListTasksTotalAndStatusTimestamp: ListTasks' totalSize is
// how many tasks match on every page, not the page's size, and
// statusTimestampAfter keeps the tasks whose status was observed after it.
// Over both bindings, with a2a-go v2's client.
func TestGatewayListTasksTotalAndStatusTimestamp(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	acme := e.client(t, e.acme, orgID, a2a.TransportProtocolJSONRPC)
	working := func(task *a2a.Task) bool {
		return task.Status.State == a2a.TaskStateWorking && task.Status.Timestamp != nil
	}
	var ids []a2a.TaskID
	var first *a2a.Task
	for i, text := range []string{"Order 1 lamp", "Order 2 lamps", "Order 3 lamps"} {
		task := send(t, acme, ledgerMessage("po-list-"+strings.ReplaceAll(text, " ", "-"), text, 1_000))
		task = waitTask(t, acme, task.ID, "the task working", working)
		if i == 0 {
			first = task
		}
		ids = append(ids, task.ID)
	}
	// globex's task is none of acme's, on any page.
	globex := e.client(t, e.globex, orgID, a2a.TransportProtocolJSONRPC)
	send(t, globex, ledgerMessage("po-list-globex", "Order 9 lamps", 1_000))

	cut := *first.Status.Timestamp
	stamps := map[a2a.TaskID]time.Time{}
	for _, id := range ids {
		task, err := acme.GetTask(context.Background(), &a2a.GetTaskRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		stamps[id] = *task.Status.Timestamp
	}
	afterCut := func(cut time.Time) []a2a.TaskID {
		var out []a2a.TaskID
		for _, id := range ids {
			if stamps[id].After(cut) {
				out = append(out, id)
			}
		}
		return out
	}
	after := afterCut(cut)
	if len(after) != 2 {
		t.Fatalf("the later tasks' status timestamps are not after the first's (%s): %v", cut, stamps)
	}
	// The filter to the microsecond, over HTTP+JSON by hand.
	var raw struct {
		Tasks []struct {
			ID a2a.TaskID `json:"id"`
		} `json:"tasks"`
		TotalSize int `json:"totalSize"`
	}
	e.Do(t, http.MethodGet, "/a2a/orgs/"+orgID+"/rest/tasks?statusTimestampAfter="+url.QueryEscape(cut.Format(time.RFC3339Nano)), e.acme, nil).
		Expect(t, http.StatusOK).JSON(t, &raw)
	var got []a2a.TaskID
	for _, task := range raw.Tasks {
		got = append(got, task.ID)
	}
	if !sameIDs(got, after) || raw.TotalSize != 2 {
		t.Fatalf("GET /tasks?statusTimestampAfter=%s listed %v (totalSize %d), want %v", cut.Format(time.RFC3339Nano), got, raw.TotalSize, after)
	}
	e.Do(t, http.MethodGet, "/a2a/orgs/"+orgID+"/rest/tasks?statusTimestampAfter=yesterday", e.acme, nil).Expect(t, http.StatusBadRequest)

	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON} {
		c := e.client(t, e.acme, orgID, binding)
		ctx := context.Background()
		var listed []a2a.TaskID
		req := &a2a.ListTasksRequest{PageSize: 2}
		for page := 1; ; page++ {
			res, err := c.ListTasks(ctx, req)
			if err != nil {
				t.Fatalf("%s: page %d: %v", binding, page, err)
			}
			if res.TotalSize != 3 || res.PageSize != 2 {
				t.Fatalf("%s: page %d: totalSize %d, pageSize %d, want 3 and 2", binding, page, res.TotalSize, res.PageSize)
			}
			for _, task := range res.Tasks {
				listed = append(listed, task.ID)
			}
			if res.NextPageToken == "" {
				break
			}
			if page > 2 {
				t.Fatalf("%s: more pages than tasks", binding)
			}
			req.PageToken = res.NextPageToken
		}
		if !sameIDs(listed, ids) {
			t.Fatalf("%s: the pages listed %v, want %v", binding, listed, ids)
		}

		res, err := c.ListTasks(ctx, &a2a.ListTasksRequest{StatusTimestampAfter: &cut})
		if err != nil {
			t.Fatalf("%s: statusTimestampAfter: %v", binding, err)
		}
		var got []a2a.TaskID
		for _, task := range res.Tasks {
			got = append(got, task.ID)
		}
		after := after
		if binding == a2a.TransportProtocolHTTPJSON {
			// a2a-go's REST client sends the timestamp to the second.
			after = afterCut(cut.Truncate(time.Second))
		}
		if !sameIDs(got, after) || res.TotalSize != len(after) {
			t.Fatalf("%s: statusTimestampAfter %s listed %v (totalSize %d), want %v", binding, cut, got, res.TotalSize, after)
		}
	}
}

// sameIDs reports whether a and b hold the same ids, in any order.
func sameIDs(a, b []a2a.TaskID) bool {
	if len(a) != len(b) {
		return false
	}
	as, bs := append([]a2a.TaskID(nil), a...), append([]a2a.TaskID(nil), b...)
	sort.Slice(as, func(i, j int) bool { return as[i] < as[j] })
	sort.Slice(bs, func(i, j int) bool { return bs[i] < bs[j] })
	for i := range as {
		if as[i] != bs[i] {
			return false
		}
	}
	return true
}
