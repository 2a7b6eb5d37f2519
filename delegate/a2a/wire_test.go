package a2a

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quittance/quittance/delegate/egress"
)

// testExtensionURI is an extension the tests activate and declare.
const testExtensionURI = "https://example.com/a2a/ext/v1"

// rpcCall is one JSON-RPC request as a test server received it.
type rpcCall struct {
	Header http.Header
	ID     json.RawMessage
	Method string
	Params map[string]any
	Raw    string
}

// rpcServer is a scripted JSON-RPC server: reply produces the HTTP response
// for each call, and every call is recorded.
type rpcServer struct {
	mu    sync.Mutex
	calls []rpcCall
	reply func(w http.ResponseWriter, c rpcCall)
}

func (s *rpcServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  map[string]any  `json:"params"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.JSONRPC != "2.0" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	c := rpcCall{Header: r.Header.Clone(), ID: req.ID, Method: req.Method, Params: req.Params, Raw: string(body)}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	s.reply(w, c)
}

func (s *rpcServer) last(t *testing.T) rpcCall {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) == 0 {
		t.Fatal("no call received")
	}
	return s.calls[len(s.calls)-1]
}

func writeResult(w http.ResponseWriter, id json.RawMessage, result string) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, result)
}

func setupRPC(t *testing.T, iface AgentInterface, reply func(w http.ResponseWriter, c rpcCall)) (*rpcServer, *Client) {
	t.Helper()
	s := &rpcServer{reply: reply}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	iface.URL = srv.URL + "/a2a"
	return s, NewClient(egress.NewClient(loopbackPolicy), iface)
}

// jsonPath fetches a nested value from decoded JSON by member names.
func jsonPath(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

var v1Iface = AgentInterface{Binding: BindingJSONRPC, ProtocolVersion: "1.0", Tenant: "acme"}

func TestV1SendMessageWire(t *testing.T) {
	t.Parallel()
	s, c := setupRPC(t, v1Iface, func(w http.ResponseWriter, call rpcCall) {
		// The id comes back as a string.
		writeResult(w, json.RawMessage(`"`+strings.Trim(string(call.ID), `"`)+`"`),
			`{"task":{"id":"t-1","contextId":"ctx-1","status":{"state":"TASK_STATE_SUBMITTED","timestamp":"2026-01-02T03:04:05.5Z"}}}`)
	})
	res, err := c.SendMessage(t.Context(), SendRequest{
		Message: Message{
			MessageID: "m-1", ContextID: "ctx-1", Role: RoleUser,
			Parts: []Part{
				{Text: "cancel effects"},
				{Data: json.RawMessage(`{"compensationRequest":{"taskId":"t-0"}}`)},
				{Raw: []byte{0xff, 0x00}, MediaType: "application/octet-stream", Filename: "x.bin"},
			},
			Extensions:       []string{testExtensionURI},
			ReferenceTaskIDs: []string{"t-0"},
		},
		ReturnImmediately: true,
		Push:              &PushConfig{ID: "cfg", URL: "https://quittance.example/push", Token: "tok", AuthScheme: "Bearer", AuthCredentials: "cred"},
		Extensions:        []string{testExtensionURI, "https://example.com/ext/b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Task == nil || res.Task.ID != "t-1" || res.Task.Status.State != TaskStateSubmitted ||
		!res.Task.Status.Timestamp.Equal(time.Date(2026, 1, 2, 3, 4, 5, 5e8, time.UTC)) {
		t.Fatalf("result = %+v", res.Task)
	}

	call := s.last(t)
	if call.Method != "SendMessage" {
		t.Fatalf("method = %q", call.Method)
	}
	for h, want := range map[string]string{
		"A2A-Version":    "1.0",
		"A2A-Extensions": testExtensionURI + ", https://example.com/ext/b",
		"Content-Type":   "application/json",
	} {
		if got := call.Header.Get(h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}
	if call.Header.Get("X-A2A-Extensions") != "" {
		t.Error("v1.0 request carries the v0.3 extensions header")
	}
	checks := map[string]string{
		"tenant":                                   `"acme"`,
		"message/role":                             `"ROLE_USER"`,
		"message/messageId":                        `"m-1"`,
		"message/parts":                            `[{"text":"cancel effects"},{"data":{"compensationRequest":{"taskId":"t-0"}}},{"filename":"x.bin","mediaType":"application/octet-stream","raw":"/wA="}]`,
		"message/extensions":                       `["` + testExtensionURI + `"]`,
		"message/referenceTaskIds":                 `["t-0"]`,
		"message/kind":                             `null`,
		"configuration/returnImmediately":          `true`,
		"configuration/blocking":                   `null`,
		"configuration/taskPushNotificationConfig": `{"authentication":{"credentials":"cred","scheme":"Bearer"},"id":"cfg","tenant":"acme","token":"tok","url":"https://quittance.example/push"}`,
		"configuration/pushNotificationConfig":     `null`,
	}
	for path, want := range checks {
		if got := asJSON(jsonPath(call.Params, strings.Split(path, "/")...)); got != want {
			t.Errorf("params %s = %s, want %s", path, got, want)
		}
	}
}

func TestV1TaskMethodsWire(t *testing.T) {
	t.Parallel()
	s, c := setupRPC(t, v1Iface, func(w http.ResponseWriter, call rpcCall) {
		switch call.Method {
		case "GetTask":
			writeResult(w, call.ID, `{"id":"t-1","contextId":"ctx-1","status":{"state":"TASK_STATE_INPUT_REQUIRED",
				"message":{"messageId":"a-1","role":"ROLE_AGENT","parts":[{"text":"which PO?"}]}},
				"artifacts":[{"artifactId":"compensation-receipt","name":"compensation-receipt","parts":[{"data":{"outcome":"compensated"}},{"raw":"_-8"}]}],
				"metadata":{"k":"v"}}`)
		case "CancelTask":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32002,"message":"Task cannot be canceled","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TASK_NOT_CANCELABLE","domain":"a2a-protocol.org"}]}}`, call.ID)
		case "CreateTaskPushNotificationConfig":
			writeResult(w, call.ID, asJSON(call.Params))
		default:
			t.Errorf("unexpected method %q", call.Method)
			http.Error(w, "no", http.StatusNotFound)
		}
	})

	task, err := c.GetTask(t.Context(), "t-1")
	if err != nil {
		t.Fatal(err)
	}
	if task.Status.State != TaskStateInputRequired || task.Status.Message == nil ||
		task.Status.Message.Role != RoleAgent || task.Status.Message.Parts[0].Text != "which PO?" {
		t.Fatalf("task status = %+v", task.Status)
	}
	if len(task.Artifacts) != 1 || task.Artifacts[0].Name != "compensation-receipt" ||
		string(task.Artifacts[0].Parts[0].Data) != `{"outcome":"compensated"}` ||
		string(task.Artifacts[0].Parts[1].Raw) != "\xff\xef" || string(task.Metadata) != `{"k":"v"}` {
		t.Fatalf("task = %+v", task)
	}
	call := s.last(t)
	if call.Method != "GetTask" || asJSON(call.Params) != `{"id":"t-1","tenant":"acme"}` || call.Header.Get("A2A-Version") != "1.0" {
		t.Fatalf("GetTask call = %s %s", call.Method, call.Raw)
	}

	_, err = c.CancelTask(t.Context(), "t-1", []string{testExtensionURI})
	if !errors.Is(err, ErrTaskNotCancelable) || errors.Is(err, ErrTaskNotFound) {
		t.Fatalf("cancel error = %v", err)
	}
	var rpcErr *RPCError
	if !errors.As(err, &rpcErr) || !strings.HasPrefix(string(rpcErr.Data), "[") || !strings.Contains(string(rpcErr.Data), "TASK_NOT_CANCELABLE") {
		t.Fatalf("error data not kept: %#v", err)
	}
	call = s.last(t)
	if call.Method != "CancelTask" || asJSON(call.Params) != `{"id":"t-1","tenant":"acme"}` || call.Header.Get("A2A-Extensions") != testExtensionURI {
		t.Fatalf("CancelTask call = %s %s", call.Method, call.Raw)
	}

	if err := c.SetPushConfig(t.Context(), "t-1", PushConfig{URL: "https://q.example/push", Token: "tok"}); err != nil {
		t.Fatal(err)
	}
	call = s.last(t)
	if call.Method != "CreateTaskPushNotificationConfig" ||
		asJSON(call.Params) != `{"taskId":"t-1","tenant":"acme","token":"tok","url":"https://q.example/push"}` {
		t.Fatalf("push config call = %s %s", call.Method, call.Raw)
	}
}

func TestV1NoTenant(t *testing.T) {
	t.Parallel()
	iface := v1Iface
	iface.Tenant = ""
	s, c := setupRPC(t, iface, func(w http.ResponseWriter, call rpcCall) {
		writeResult(w, call.ID, `{"id":"t-1","status":{"state":"TASK_STATE_WORKING"}}`)
	})
	if _, err := c.GetTask(t.Context(), "t-1"); err != nil {
		t.Fatal(err)
	}
	if got := asJSON(s.last(t).Params); got != `{"id":"t-1"}` {
		t.Fatalf("params = %s", got)
	}
}

func TestV1Subscribe(t *testing.T) {
	t.Parallel()
	s, c := setupRPC(t, v1Iface, func(w http.ResponseWriter, call rpcCall) {
		w.Header().Set("Content-Type", "text/event-stream")
		id := string(call.ID)
		fmt.Fprintf(w, ": heartbeat\r\n\r\n")
		fmt.Fprintf(w, "id: 1\r\ndata:{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"statusUpdate\":{\"taskId\":\"t-1\",\"contextId\":\"c\",\"status\":{\"state\":\"TASK_STATE_WORKING\"}}}}\r\n\r\n", id)
		fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\n", id)
		fmt.Fprintf(w, "data: \"result\":{\"artifactUpdate\":{\"taskId\":\"t-1\",\"contextId\":\"c\",\"append\":true,\"lastChunk\":true,\"artifact\":{\"artifactId\":\"a\",\"parts\":[{\"text\":\"x\"}]}}}}\n\n")
		fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"statusUpdate\":{\"taskId\":\"t-1\",\"contextId\":\"c\",\"status\":{\"state\":\"TASK_STATE_COMPLETED\"}}}}\n\n", id)
	})
	var got []string
	for ev, err := range c.Subscribe(t.Context(), "t-1") {
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.StatusUpdate != nil:
			got = append(got, "status:"+string(ev.StatusUpdate.Status.State))
		case ev.ArtifactUpdate != nil:
			u := ev.ArtifactUpdate
			got = append(got, fmt.Sprintf("artifact:%s:%s:%v:%v", u.Artifact.ArtifactID, u.Artifact.Parts[0].Text, u.Append, u.LastChunk))
		}
	}
	if want := "status:working artifact:a:x:true:true status:completed"; strings.Join(got, " ") != want {
		t.Fatalf("events = %v, want %s", got, want)
	}
	call := s.last(t)
	if call.Method != "SubscribeToTask" || call.Header.Get("Accept") != "text/event-stream" ||
		call.Header.Get("A2A-Version") != "1.0" || asJSON(call.Params) != `{"id":"t-1","tenant":"acme"}` {
		t.Fatalf("subscribe call = %s %v %s", call.Method, call.Header, call.Raw)
	}
}

func TestSubscribeErrorAsJSON(t *testing.T) {
	t.Parallel()
	_, c := setupRPC(t, v1Iface, func(w http.ResponseWriter, call rpcCall) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32004,"message":"task is terminal"}}`, call.ID)
	})
	n := 0
	for _, err := range c.Subscribe(t.Context(), "t-1") {
		n++
		if !errors.Is(err, ErrUnsupportedOperation) {
			t.Fatalf("got %v, want ErrUnsupportedOperation", err)
		}
	}
	if n != 1 {
		t.Fatalf("%d items, want one error", n)
	}
}

func TestV03Wire(t *testing.T) {
	t.Parallel()
	iface := AgentInterface{Binding: BindingJSONRPC, ProtocolVersion: "0.3", Tenant: "ignored"}
	s, c := setupRPC(t, iface, func(w http.ResponseWriter, call rpcCall) {
		switch call.Method {
		case "message/send":
			writeResult(w, call.ID, `{"kind":"message","messageId":"r-1","role":"agent","parts":[{"kind":"text","text":"no task needed"}]}`)
		case "tasks/pushNotificationConfig/set":
			writeResult(w, call.ID, asJSON(call.Params))
		default:
			writeResult(w, call.ID, `{"kind":"task","id":"t-1","contextId":"c","status":{"state":"input-required"}}`)
		}
	})
	res, err := c.SendMessage(t.Context(), SendRequest{
		Message:           Message{MessageID: "m-1", Parts: []Part{{Text: "hi"}, {Data: json.RawMessage(`{"a":1}`)}, {URL: "https://x.example/f.pdf", MediaType: "application/pdf"}}},
		ReturnImmediately: true,
		Push:              &PushConfig{URL: "https://q.example/push", AuthScheme: "Bearer", AuthCredentials: "c"},
		Extensions:        []string{testExtensionURI},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Message == nil || res.Message.Role != RoleAgent || res.Message.Parts[0].Text != "no task needed" {
		t.Fatalf("result = %+v", res)
	}
	call := s.last(t)
	if call.Method != "message/send" || call.Header.Get("X-A2A-Extensions") != testExtensionURI || call.Header.Get("A2A-Extensions") != "" {
		t.Fatalf("send call = %s %v", call.Method, call.Header)
	}
	if call.Header.Get("A2A-Version") != "0.3" {
		t.Fatalf("A2A-Version = %q", call.Header.Get("A2A-Version"))
	}
	checks := map[string]string{
		"tenant":        `null`,
		"message/kind":  `"message"`,
		"message/role":  `"user"`,
		"message/parts": `[{"kind":"text","text":"hi"},{"data":{"a":1},"kind":"data"},{"file":{"mimeType":"application/pdf","uri":"https://x.example/f.pdf"},"kind":"file"}]`,
		"configuration": `{"blocking":false,"pushNotificationConfig":{"authentication":{"credentials":"c","schemes":["Bearer"]},"url":"https://q.example/push"}}`,
	}
	for path, want := range checks {
		if got := asJSON(jsonPath(call.Params, strings.Split(path, "/")...)); got != want {
			t.Errorf("params %s = %s, want %s", path, got, want)
		}
	}

	for _, tc := range []struct {
		method string
		do     func() error
	}{
		{"tasks/get", func() error { _, err := c.GetTask(t.Context(), "t-1"); return err }},
		{"tasks/cancel", func() error { _, err := c.CancelTask(t.Context(), "t-1", nil); return err }},
	} {
		if err := tc.do(); err != nil {
			t.Fatalf("%s: %v", tc.method, err)
		}
		if call := s.last(t); call.Method != tc.method || asJSON(call.Params) != `{"id":"t-1"}` {
			t.Fatalf("call = %s %s", call.Method, call.Raw)
		}
	}
	if err := c.SetPushConfig(t.Context(), "t-1", PushConfig{URL: "https://q.example/push", Token: "tok"}); err != nil {
		t.Fatal(err)
	}
	if call := s.last(t); call.Method != "tasks/pushNotificationConfig/set" ||
		asJSON(call.Params) != `{"pushNotificationConfig":{"token":"tok","url":"https://q.example/push"},"taskId":"t-1"}` {
		t.Fatalf("push call = %s %s", call.Method, call.Raw)
	}
}

func TestHTTPStatusErrors(t *testing.T) {
	t.Parallel()
	for _, code := range []int{400, 429, 503} {
		_, c := setupRPC(t, v1Iface, func(w http.ResponseWriter, call rpcCall) {
			http.Error(w, "nope", code)
		})
		_, err := c.GetTask(t.Context(), "t-1")
		var statusErr *HTTPStatusError
		if !errors.As(err, &statusErr) || statusErr.StatusCode != code {
			t.Fatalf("status %d: got %v", code, err)
		}
		if Retryable(err) != (code != 400) {
			t.Fatalf("status %d: Retryable = %v", code, Retryable(err))
		}
	}
}

func TestResponseBodyCap(t *testing.T) {
	t.Parallel()
	_, c := setupRPC(t, v1Iface, func(w http.ResponseWriter, call rpcCall) {
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"id":"t","status":{"state":"working"},"metadata":{"pad":"`, call.ID)
		w.Write([]byte(strings.Repeat("x", maxBodyBytes)))
		io.WriteString(w, `"}}}`)
	})
	if _, err := c.GetTask(t.Context(), "t"); !errors.Is(err, ErrBodyTooLarge) {
		t.Fatalf("got %v, want ErrBodyTooLarge", err)
	}
}

func TestEncodeRPCRequestEmptyParams(t *testing.T) {
	t.Parallel()
	for _, params := range []any{nil, struct{}{}} {
		b, err := encodeRPCRequest(7, "GetExtendedAgentCard", params)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"jsonrpc":"2.0","id":7,"method":"GetExtendedAgentCard","params":{}}`; string(b) != want {
			t.Fatalf("got %s, want %s", b, want)
		}
	}
}

func TestDecodeRPCResponse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body string
		result     string
		code       int
		malformed  bool
	}{
		{"number id", `{"jsonrpc":"2.0","id":3,"result":{"a":1}}`, `{"a":1}`, 0, false},
		{"string id", `{"jsonrpc":"2.0","id":"3","result":{"a":1}}`, `{"a":1}`, 0, false},
		{"wrong id", `{"jsonrpc":"2.0","id":4,"result":{"a":1}}`, "", 0, true},
		{"missing id", `{"jsonrpc":"2.0","result":{"a":1}}`, "", 0, true},
		{"null result", `{"jsonrpc":"2.0","id":3,"result":null}`, "", 0, true},
		{"error with null id", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse"}}`, "", -32700, false},
		{"error with object data", `{"jsonrpc":"2.0","id":3,"error":{"code":-32001,"message":"nf","data":{"error":"x"}}}`, "", -32001, false},
		{"error with string data", `{"jsonrpc":"2.0","id":3,"error":{"code":-32009,"message":"v","data":"1.0 only"}}`, "", -32009, false},
		{"not JSON", `<html>`, "", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, err := decodeRPCResponse([]byte(tc.body), 3)
			var rpcErr *RPCError
			switch {
			case tc.malformed:
				if !errors.Is(err, ErrMalformedResponse) {
					t.Fatalf("got %s, %v; want ErrMalformedResponse", res, err)
				}
			case tc.code != 0:
				if !errors.As(err, &rpcErr) || rpcErr.Code != tc.code {
					t.Fatalf("got %v, want code %d", err, tc.code)
				}
			default:
				if err != nil || string(res) != tc.result {
					t.Fatalf("got %s, %v", res, err)
				}
			}
		})
	}
	_, err := decodeRPCResponse([]byte(`{"jsonrpc":"2.0","id":3,"error":{"code":-32009,"message":"v"}}`), 3)
	if !errors.Is(err, ErrVersionNotSupported) || errors.Is(err, ErrExtensionSupportRequired) {
		t.Fatalf("sentinel match: %v", err)
	}
}
