package a2a

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quittance/quittance/delegate/egress"
)

const v1CardJSON = `{
  "name": "Logistics Agent",
  "description": "ships things",
  "version": "2.1.0",
  "supportedInterfaces": [
    {"url": "https://grpc.agent.example/a2a", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
    {"url": "https://agent.example/legacy", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
    {"url": "https://agent.example/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0", "tenant": "acme"}
  ],
  "capabilities": {
    "streaming": true,
    "extensions": [
      {"uri": "https://quittance.dev/a2a/compensation/v1", "required": true, "params": {"atomicCancel": true}}
    ]
  },
  "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": []
}`

func TestFetchAgentCardV1(t *testing.T) {
	t.Parallel()
	var version string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		version = r.Header.Get("A2A-Version")
		io.WriteString(w, v1CardJSON)
	}))
	t.Cleanup(srv.Close)
	hc := egress.NewClient(loopbackPolicy)
	allowed := []string{"GRPC.agent.example", "agent.example"}
	card, err := FetchAgentCard(t.Context(), hc, srv.URL+"/.well-known/agent-card.json", allowed)
	if err != nil {
		t.Fatal(err)
	}
	if version != "1.0" {
		t.Fatalf("A2A-Version sent = %q", version)
	}
	if card.Name != "Logistics Agent" || !card.Streaming || card.PushNotifications || len(card.Interfaces) != 3 {
		t.Fatalf("card = %+v", card)
	}
	iface, err := card.JSONRPCInterface()
	want := AgentInterface{URL: "https://agent.example/a2a", Binding: "JSONRPC", ProtocolVersion: "1.0", Tenant: "acme"}
	if err != nil || iface != want {
		t.Fatalf("JSONRPCInterface = %+v, %v; want %+v", iface, err, want)
	}
	ext, ok := card.Extension("https://quittance.dev/a2a/compensation/v1")
	if !ok || !ext.Required || string(ext.Params) != `{"atomicCancel": true}` {
		t.Fatalf("extension = %+v, %v", ext, ok)
	}
	if _, ok := card.Extension("https://example.com/other"); ok {
		t.Fatal("undeclared extension found")
	}

	_, err = FetchAgentCard(t.Context(), hc, srv.URL+"/.well-known/agent-card.json", []string{"agent.example"})
	if !errors.Is(err, egress.ErrDenied) || !strings.Contains(err.Error(), "grpc.agent.example") {
		t.Fatalf("interface on a host not allowed: got %v", err)
	}
}

func TestParseAgentCard(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		json    string
		want    []AgentInterface
		wantErr bool
	}{
		{
			name: "v0.3 defaults to JSONRPC",
			json: `{"name":"a","url":"https://a.example/rpc","protocolVersion":"0.3.0"}`,
			want: []AgentInterface{{URL: "https://a.example/rpc", Binding: "JSONRPC", ProtocolVersion: "0.3"}},
		},
		{
			name: "v0.3 additional interfaces deduplicated",
			json: `{"name":"a","url":"https://a.example/grpc","preferredTransport":"GRPC","protocolVersion":"0.3.0",
				"additionalInterfaces":[{"url":"https://a.example/grpc","transport":"GRPC"},{"url":"https://a.example/rpc","transport":"JSONRPC"}]}`,
			want: []AgentInterface{
				{URL: "https://a.example/grpc", Binding: "GRPC", ProtocolVersion: "0.3"},
				{URL: "https://a.example/rpc", Binding: "JSONRPC", ProtocolVersion: "0.3"},
			},
		},
		{
			name: "v1.0 wins over a stray url",
			json: `{"name":"a","url":"https://old.example/","supportedInterfaces":[{"url":"https://a.example/","protocolBinding":"jsonrpc","protocolVersion":"1.0.0"}]}`,
			want: []AgentInterface{{URL: "https://a.example/", Binding: "JSONRPC", ProtocolVersion: "1.0"}},
		},
		{name: "no interface", json: `{"name":"a"}`, wantErr: true},
		{name: "interface without url", json: `{"supportedInterfaces":[{"protocolBinding":"JSONRPC"}]}`, wantErr: true},
		{name: "not JSON", json: `<html>`, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			card, err := parseAgentCard([]byte(tc.json))
			if tc.wantErr {
				if !errors.Is(err, ErrMalformedResponse) {
					t.Fatalf("got %+v, %v; want ErrMalformedResponse", card, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(card.Interfaces) != len(tc.want) {
				t.Fatalf("interfaces = %+v, want %+v", card.Interfaces, tc.want)
			}
			for i := range tc.want {
				if card.Interfaces[i] != tc.want[i] {
					t.Fatalf("interfaces = %+v, want %+v", card.Interfaces, tc.want)
				}
			}
		})
	}
	card, _ := parseAgentCard([]byte(`{"supportedInterfaces":[{"url":"https://a.example/","protocolBinding":"GRPC","protocolVersion":"1.0"}]}`))
	if _, err := card.JSONRPCInterface(); !errors.Is(err, ErrNoJSONRPCInterface) {
		t.Fatalf("gRPC-only card: %v", err)
	}
}

func TestFetchAgentCardErrors(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/missing", http.NotFound)
	mux.HandleFunc("/huge", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"name":"`+strings.Repeat("x", maxCardBytes)+`"}`)
	})
	mux.HandleFunc("/userinfo", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"url":"https://u:p@agent.example/rpc"}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	hc := egress.NewClient(loopbackPolicy)
	allowed := []string{"agent.example"}

	var statusErr *HTTPStatusError
	if _, err := FetchAgentCard(t.Context(), hc, srv.URL+"/missing", allowed); !errors.As(err, &statusErr) || statusErr.StatusCode != 404 {
		t.Fatalf("404: %v", err)
	}
	if _, err := FetchAgentCard(t.Context(), hc, srv.URL+"/huge", allowed); !errors.Is(err, ErrBodyTooLarge) {
		t.Fatalf("huge card: %v", err)
	}
	if _, err := FetchAgentCard(t.Context(), hc, srv.URL+"/userinfo", allowed); !errors.Is(err, egress.ErrDenied) {
		t.Fatalf("userinfo in interface: %v", err)
	}
}
