package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/quittance/quittance/delegate/egress"
)

// maxCardBytes caps an agent card.
const maxCardBytes = 1 << 20

// ErrNoJSONRPCInterface reports an agent card without a JSON-RPC interface
// in a protocol version this client speaks (1.0 or 0.3).
var ErrNoJSONRPCInterface = errors.New("a2a: agent card has no usable JSON-RPC interface")

// ErrNoUsableInterface reports an agent card without an interface this
// client speaks (Supports), or a call on such an interface.
var ErrNoUsableInterface = errors.New("a2a: agent card has no usable interface")

// The protocol binding names of A2A interfaces, as AgentInterface.Binding
// holds them.
const (
	// BindingJSONRPC is JSON-RPC 2.0 over HTTP (A2A v1.0 and v0.3).
	BindingJSONRPC = "JSONRPC"
	// BindingHTTPJSON is the HTTP+JSON (REST) binding (A2A v1.0 here).
	BindingHTTPJSON = "HTTP+JSON"
	// BindingGRPC is the gRPC binding (A2A v1.0 here).
	BindingGRPC = "GRPC"
)

// Supports reports whether the client speaks the interface: JSON-RPC in
// A2A v1.0 or v0.3, HTTP+JSON and gRPC in v1.0.
func Supports(iface AgentInterface) bool {
	switch iface.ProtocolVersion {
	case "1.0":
		return iface.Binding == BindingJSONRPC || iface.Binding == BindingHTTPJSON || iface.Binding == BindingGRPC
	case "0.3":
		return iface.Binding == BindingJSONRPC
	}
	return false
}

// AgentCard is a remote agent's card, normalized over the A2A v1.0 and v0.3
// card shapes.
type AgentCard struct {
	Name              string
	Interfaces        []AgentInterface
	Streaming         bool
	PushNotifications bool
	Extensions        []AgentExtension
	// Signatures are the card's signatures, none when it is unsigned;
	// SignedPayload is what they sign (CardSigningPayload). Who verifies
	// them, with which keys, is the caller's (delegate/A2A.md).
	Signatures    []CardSignature
	SignedPayload []byte
}

// AgentInterface is one endpoint of an agent. Binding is upper case
// ("JSONRPC", "GRPC", "HTTP+JSON"); ProtocolVersion is major.minor ("1.0",
// "0.3"). A non-empty Tenant must be sent with every request.
type AgentInterface struct {
	URL             string
	Binding         string
	ProtocolVersion string
	Tenant          string
}

// AgentExtension is an A2A extension the agent declares.
type AgentExtension struct {
	URI      string
	Required bool
	Params   json.RawMessage
}

type wireCard struct {
	Name                string `json:"name"`
	SupportedInterfaces []struct {
		URL             string `json:"url"`
		ProtocolBinding string `json:"protocolBinding"`
		Tenant          string `json:"tenant"`
		ProtocolVersion string `json:"protocolVersion"`
	} `json:"supportedInterfaces"`
	URL                  string `json:"url"`
	PreferredTransport   string `json:"preferredTransport"`
	ProtocolVersion      string `json:"protocolVersion"`
	AdditionalInterfaces []struct {
		URL       string `json:"url"`
		Transport string `json:"transport"`
	} `json:"additionalInterfaces"`
	Capabilities struct {
		Streaming         bool `json:"streaming"`
		PushNotifications bool `json:"pushNotifications"`
		Extensions        []struct {
			URI      string          `json:"uri"`
			Required bool            `json:"required"`
			Params   json.RawMessage `json:"params"`
		} `json:"extensions"`
	} `json:"capabilities"`
}

// FetchAgentCard fetches the agent card at cardURL, the URL pinned for the
// organization (no discovery), and normalizes it. Every interface URL must
// be an http(s) URL whose host is in allowedHosts (compared without case),
// so a card cannot send the client's calls elsewhere.
func FetchAgentCard(ctx context.Context, client *http.Client, cardURL string, allowedHosts []string) (AgentCard, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cardURL, nil)
	if err != nil {
		return AgentCard{}, fmt.Errorf("fetch agent card: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("A2A-Version", "1.0")
	resp, err := client.Do(req)
	if err != nil {
		return AgentCard{}, fmt.Errorf("fetch agent card: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return AgentCard{}, fmt.Errorf("fetch agent card: %w", &HTTPStatusError{StatusCode: resp.StatusCode})
	}
	body, err := readCapped(resp.Body, maxCardBytes)
	if err != nil {
		return AgentCard{}, fmt.Errorf("fetch agent card: %w", err)
	}
	card, err := parseAgentCard(body)
	if err != nil {
		return AgentCard{}, fmt.Errorf("fetch agent card: %w", err)
	}
	if card.Signatures, card.SignedPayload, err = readCardSignatures(body); err != nil {
		return AgentCard{}, fmt.Errorf("fetch agent card: %w", err)
	}
	for _, iface := range card.Interfaces {
		if err := checkInterfaceHost(iface, allowedHosts); err != nil {
			return AgentCard{}, fmt.Errorf("fetch agent card: %w", err)
		}
	}
	return card, nil
}

func checkInterfaceHost(iface AgentInterface, allowedHosts []string) error {
	raw := iface.URL
	u, err := interfaceURL(iface)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%w: interface URL %q is not an http(s) URL", egress.ErrDenied, raw)
	}
	if u.User != nil {
		return fmt.Errorf("%w: interface URL has userinfo", egress.ErrDenied)
	}
	host := u.Hostname()
	if !slices.ContainsFunc(allowedHosts, func(h string) bool { return strings.EqualFold(h, host) }) {
		return fmt.Errorf("%w: interface host %q is not an allowed host of the organization", egress.ErrDenied, host)
	}
	return nil
}

// parseAgentCard normalizes a v1.0 card (supportedInterfaces) or a v0.3
// card (url, preferredTransport, additionalInterfaces).
func parseAgentCard(body []byte) (AgentCard, error) {
	var w wireCard
	if err := json.Unmarshal(body, &w); err != nil {
		return AgentCard{}, fmt.Errorf("%w: agent card: %w", ErrMalformedResponse, err)
	}
	card := AgentCard{
		Name:              w.Name,
		Streaming:         w.Capabilities.Streaming,
		PushNotifications: w.Capabilities.PushNotifications,
	}
	for _, e := range w.Capabilities.Extensions {
		card.Extensions = append(card.Extensions, AgentExtension{URI: e.URI, Required: e.Required, Params: nonNull(e.Params)})
	}
	switch {
	case len(w.SupportedInterfaces) > 0:
		for _, i := range w.SupportedInterfaces {
			version := majorMinor(i.ProtocolVersion)
			if version == "" {
				version = "1.0"
			}
			card.Interfaces = append(card.Interfaces, AgentInterface{
				URL: i.URL, Binding: strings.ToUpper(i.ProtocolBinding), ProtocolVersion: version, Tenant: i.Tenant,
			})
		}
	case w.URL != "":
		version := majorMinor(w.ProtocolVersion)
		if version == "" {
			version = "0.3"
		}
		transport := strings.ToUpper(w.PreferredTransport)
		if transport == "" {
			transport = BindingJSONRPC
		}
		card.Interfaces = append(card.Interfaces, AgentInterface{URL: w.URL, Binding: transport, ProtocolVersion: version})
		for _, i := range w.AdditionalInterfaces {
			iface := AgentInterface{URL: i.URL, Binding: strings.ToUpper(i.Transport), ProtocolVersion: version}
			if !slices.Contains(card.Interfaces, iface) {
				card.Interfaces = append(card.Interfaces, iface)
			}
		}
	default:
		return AgentCard{}, fmt.Errorf("%w: agent card declares no interface", ErrMalformedResponse)
	}
	for _, iface := range card.Interfaces {
		if iface.URL == "" {
			return AgentCard{}, fmt.Errorf("%w: agent card interface without url", ErrMalformedResponse)
		}
	}
	return card, nil
}

// interfaceURL parses an interface's URL. A gRPC interface may name its
// target as a bare host:port, as a2a-go's cards do: that is TLS, read as
// https://host:port.
func interfaceURL(iface AgentInterface) (*url.URL, error) {
	if iface.Binding == BindingGRPC && !strings.Contains(iface.URL, "://") {
		if host, port, err := net.SplitHostPort(iface.URL); err == nil && host != "" && port != "" {
			return &url.URL{Scheme: "https", Host: iface.URL}, nil
		}
	}
	return url.Parse(iface.URL)
}

// majorMinor reduces "0.3.0" to "0.3".
func majorMinor(v string) string {
	v = strings.TrimSpace(v)
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// PreferredInterface returns the interface to call: the first, in the
// order the card declares them, of its A2A v1.0 interfaces the client
// speaks (JSON-RPC, HTTP+JSON, gRPC), or else its first v0.3 JSON-RPC
// interface. A card that offers both versions is spoken to in 1.0 whatever
// its order, as JSONRPCInterface always did.
func (c AgentCard) PreferredInterface() (AgentInterface, error) {
	for _, version := range []string{"1.0", "0.3"} {
		for _, iface := range c.Interfaces {
			if iface.ProtocolVersion == version && Supports(iface) {
				return iface, nil
			}
		}
	}
	return AgentInterface{}, ErrNoUsableInterface
}

// JSONRPCInterface returns the first JSON-RPC interface in protocol version
// 1.0, or else the first in version 0.3.
func (c AgentCard) JSONRPCInterface() (AgentInterface, error) {
	for _, version := range []string{"1.0", "0.3"} {
		for _, iface := range c.Interfaces {
			if iface.Binding == BindingJSONRPC && iface.ProtocolVersion == version {
				return iface, nil
			}
		}
	}
	return AgentInterface{}, ErrNoJSONRPCInterface
}

// Extension returns the extension with the given URI, if the card declares
// it.
func (c AgentCard) Extension(uri string) (AgentExtension, bool) {
	for _, e := range c.Extensions {
		if e.URI == uri {
			return e, true
		}
	}
	return AgentExtension{}, false
}
