package a2a

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
)

// TestListTasksWire: ListTasks is v1.0 "ListTasks" and v0.3 "tasks/list",
// filtered on the context, paged, with each task's history messageIds; an
// agent answering -32601 or -32004 does not list tasks (Unsupported), and
// no other error is read so.
func TestListTasksWire(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version, method, task string
	}{
		{"1.0", "ListTasks", `{"id":"t-%d","contextId":"ctx-q","status":{"state":"TASK_STATE_WORKING"},"history":[{"messageId":"m-1","role":"ROLE_USER","parts":[{"text":"x"}]}]}`},
		{"0.3", "tasks/list", `{"kind":"task","id":"t-%d","contextId":"ctx-q","status":{"state":"working"},"history":[{"kind":"message","messageId":"m-1","role":"user","parts":[{"kind":"text","text":"x"}]}]}`},
	} {
		t.Run(tc.version, func(t *testing.T) {
			t.Parallel()
			srv, c := setupRPC(t, AgentInterface{Binding: BindingJSONRPC, ProtocolVersion: tc.version}, func(w http.ResponseWriter, call rpcCall) {
				if call.Method != tc.method {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, call.ID)
					return
				}
				if call.Params["pageToken"] == "p2" {
					writeResult(w, call.ID, `{"tasks":[`+fmt.Sprintf(tc.task, 2)+`],"nextPageToken":""}`)
					return
				}
				writeResult(w, call.ID, `{"tasks":[`+fmt.Sprintf(tc.task, 1)+`],"nextPageToken":"p2"}`)
			})
			page, err := c.ListTasks(context.Background(), ListTasksRequest{ContextID: "ctx-q", PageSize: 100, HistoryLength: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Tasks) != 1 || page.Tasks[0].ID != "t-1" || page.NextPageToken != "p2" ||
				!slices.Equal(page.Tasks[0].HistoryMessageIDs, []string{"m-1"}) || page.Tasks[0].Status.State != TaskStateWorking {
				t.Fatalf("page 1 = %+v", page)
			}
			last := srv.last(t)
			if last.Params["contextId"] != "ctx-q" || last.Params["historyLength"] != float64(10) {
				t.Fatalf("params sent = %v", last.Params)
			}
			page, err = c.ListTasks(context.Background(), ListTasksRequest{ContextID: "ctx-q", PageToken: "p2"})
			if err != nil || len(page.Tasks) != 1 || page.Tasks[0].ID != "t-2" || page.NextPageToken != "" {
				t.Fatalf("page 2 = %+v, %v", page, err)
			}
			if _, err := c.GetTask(context.Background(), "t-1"); !Unsupported(err) {
				t.Fatalf("a -32601 answer is not Unsupported: %v", err)
			}
		})
	}
	for code, want := range map[int]bool{-32601: true, -32004: true, -32602: false, -32603: false} {
		if got := Unsupported(fmt.Errorf("wrapped: %w", &RPCError{Code: code})); got != want {
			t.Errorf("Unsupported(%d) = %v, want %v", code, got, want)
		}
	}
	if Unsupported(errors.New("connection reset")) {
		t.Error("a transport error read as unsupported")
	}
}
