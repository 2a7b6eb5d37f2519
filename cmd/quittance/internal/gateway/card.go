package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/quittance/quittance/ledger"
)

// maxCardBytes bounds a remote agent card.
const maxCardBytes = 1 << 20

// serveCard serves /a2a/orgs/{org}/.well-known/agent-card.json: the org's
// agent as Quittance fronts it (GATEWAY.md, "The agent card"). Only an
// orchestrator reads it; an org that is not registered, has no agent or
// whose identity is revoked is the same 404.
func (g *Gateway) serveCard(w http.ResponseWriter, r *http.Request) {
	p, ok := g.authenticate(w, r, bindingCard)
	if !ok {
		return
	}
	org, err := g.cfg.Orchestrator.AgentOrg(r.Context(), p, r.PathValue("org"))
	if err != nil {
		if errors.Is(err, ledger.ErrNotFound) {
			writeRefusal(w, bindingCard, http.StatusNotFound, "NOT_FOUND", "no such resource")
			return
		}
		g.cfg.Log.ErrorContext(r.Context(), "gateway card: org lookup failed", slog.Any("error", err))
		writeRefusal(w, bindingCard, http.StatusServiceUnavailable, "UNAVAILABLE", "the org could not be read; try again")
		return
	}
	remote, err := g.cards.get(r.Context(), org)
	if err != nil {
		g.cfg.Log.WarnContext(r.Context(), "gateway card: remote card unavailable", slog.String("org", org.ID), slog.Any("error", err))
		writeRefusal(w, bindingCard, http.StatusBadGateway, "REMOTE_AGENT_UNAVAILABLE", "the org's agent card could not be fetched; try again later")
		return
	}
	// Both A2A versions' members in one card (v03card.go).
	card, err := dualCard(g.card(g.baseURL(r)+"/a2a/orgs/"+org.ID, remote))
	if err != nil {
		g.cfg.Log.ErrorContext(r.Context(), "gateway card: encode failed", slog.Any("error", err))
		writeRefusal(w, bindingCard, http.StatusInternalServerError, "INTERNAL_ERROR", "the card could not be encoded")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "private, max-age=60")
	_ = json.NewEncoder(w).Encode(card)
}

// card is the gateway's card for an org's agent: the remote card's name,
// description, version, provider, skills and input and output modes;
// Quittance's own interfaces (JSON-RPC and HTTP+JSON, A2A 1.0, then
// JSON-RPC, A2A 0.3, at the same URL as 1.0's) and bearer security scheme;
// and the ledger extension, required. Capabilities are what the gateway
// serves, whatever the remote agent offers: streaming, and push
// notifications when it has Config.Webhooks to deliver them.
func (g *Gateway) card(base string, remote *a2a.AgentCard) *a2a.AgentCard {
	return &a2a.AgentCard{
		Name: remote.Name, Description: remote.Description, Version: remote.Version, Provider: remote.Provider,
		DocumentationURL: remote.DocumentationURL, IconURL: remote.IconURL,
		SupportedInterfaces: []*a2a.AgentInterface{
			{URL: base + JSONRPCPath, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.Version},
			{URL: base + RESTPath, ProtocolBinding: a2a.TransportProtocolHTTPJSON, ProtocolVersion: a2a.Version},
			{URL: base + JSONRPCPath, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: v03Version},
		},
		Capabilities: a2a.AgentCapabilities{Streaming: true, PushNotifications: g.cfg.Webhooks != nil, Extensions: []a2a.AgentExtension{{
			URI: ExtensionURI, Required: true,
			Description: "Quittance's ledger: every task holds budget and is tracked until its obligation ends. " +
				"Put budget_id, hold {amount_minor, currency} and task_class in message.metadata under this URI.",
		}}},
		DefaultInputModes: nonNil(remote.DefaultInputModes), DefaultOutputModes: nonNil(remote.DefaultOutputModes),
		Skills: nonNil(remote.Skills),
		SecuritySchemes: a2a.NamedSecuritySchemes{"bearer": a2a.HTTPAuthSecurityScheme{
			Scheme: "Bearer", Description: "A Quittance API token of an orchestrator (role orchestrator, one tenant).",
		}},
		SecurityRequirements: a2a.SecurityRequirementsOptions{{"bearer": {}}},
	}
}

func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

// cardCache keeps fetched remote cards for a while, per org and card URL.
type cardCache struct {
	hc  *http.Client
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]cachedCard
}

type cachedCard struct {
	url     string
	card    *a2a.AgentCard
	fetched time.Time
}

func newCardCache(hc *http.Client, ttl time.Duration) *cardCache {
	return &cardCache{hc: hc, ttl: ttl, m: map[string]cachedCard{}}
}

// get returns org's remote agent card, fetched through the egress client
// unless one fetched from the same URL is younger than the TTL.
func (c *cardCache) get(ctx context.Context, org ledger.Org) (*a2a.AgentCard, error) {
	c.mu.Lock()
	e, ok := c.m[org.ID]
	c.mu.Unlock()
	if ok && e.url == org.AgentCardURL && time.Since(e.fetched) < c.ttl {
		return e.card, nil
	}
	card, err := fetchCard(ctx, c.hc, org.AgentCardURL)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.m[org.ID] = cachedCard{url: org.AgentCardURL, card: card, fetched: time.Now()}
	c.mu.Unlock()
	return card, nil
}

// fetchCard fetches and decodes an A2A 1.0 agent card.
func fetchCard(ctx context.Context, hc *http.Client, cardURL string) (*a2a.AgentCard, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cardURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("A2A-Version", string(a2a.Version))
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("agent card: HTTP %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxCardBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxCardBytes {
		return nil, errors.New("agent card: larger than 1 MiB")
	}
	var card a2a.AgentCard
	if err := json.Unmarshal(body, &card); err != nil {
		return nil, fmt.Errorf("agent card: %w", err)
	}
	if card.Name == "" {
		return nil, errors.New("agent card: no name")
	}
	return &card, nil
}
