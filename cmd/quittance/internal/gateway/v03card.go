package gateway

import (
	"encoding/json"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// dualCard is card as clients of both A2A versions read it: the 1.0 card,
// with, beside 1.0's members, the 0.3 members that lead a 0.3 client to
// the 0.3 interface card lists in supportedInterfaces (GATEWAY.md, "The
// agent card"). 0.3 reads url, preferredTransport, protocolVersion,
// additionalInterfaces, supportsAuthenticatedExtendedCard and security,
// which 1.0 does not have; the one member both name differently shaped,
// a security scheme, carries 0.3's "type" and fields beside 1.0's
// wrapper. a2a-go v0.3.3's and v2's card parsers and @a2a-js/sdk's read
// the card so (v03_test.go, gateway_test.go, jsclient_test.go): a 1.0
// client takes supportedInterfaces, and a 0.3 one ignores it. A card that
// lists no 0.3 interface is the 1.0 card alone.
func dualCard(card *a2a.AgentCard) (map[string]any, error) {
	raw, err := json.Marshal(card)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	var url string
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == a2a.TransportProtocolJSONRPC && i.ProtocolVersion == v03Version {
			url = i.URL
			break
		}
	}
	if url == "" {
		return out, nil
	}
	out["url"], out["preferredTransport"], out["protocolVersion"] = url, string(a2a.TransportProtocolJSONRPC), "0.3.0"
	out["additionalInterfaces"] = []map[string]string{{"url": url, "transport": string(a2a.TransportProtocolJSONRPC)}}
	out["supportsAuthenticatedExtendedCard"] = card.Capabilities.ExtendedAgentCard
	security := []map[string][]string{}
	for _, req := range card.SecurityRequirements {
		r := map[string][]string{}
		for name, scopes := range req {
			r[string(name)] = append([]string{}, scopes...)
		}
		security = append(security, r)
	}
	out["security"] = security
	schemes, _ := out["securitySchemes"].(map[string]any)
	for name, scheme := range card.SecuritySchemes {
		entry, _ := schemes[string(name)].(map[string]any)
		// The gateway declares an HTTP bearer scheme only; another kind
		// would need its own 0.3 fields here.
		if s, ok := scheme.(a2a.HTTPAuthSecurityScheme); ok && entry != nil {
			entry["type"], entry["scheme"] = "http", s.Scheme
			if s.BearerFormat != "" {
				entry["bearerFormat"] = s.BearerFormat
			}
			if s.Description != "" {
				entry["description"] = s.Description
			}
		}
	}
	return out, nil
}
