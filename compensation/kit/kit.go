// Package kit lets a remote org's A2A agent, built on
// github.com/a2aproject/a2a-go/v2, answer Quittance's compensation requests:
// it declares the compensation extension on the agent card (Extension),
// recognises a compensation request in an incoming message (RequestFrom),
// and answers it with a compensation-receipt artifact whose jws is signed
// with the org's key (Signer), the way Quittance verifies it. Wrap puts the
// three around an existing executor.
//
// The extension is specified in compensation/extension/v1/README.md of the
// Quittance repository (https://quittance.dev/a2a/compensation/v1). The kit
// is a module of its own so that an agent importing it pulls in a2a-go v2
// and go-jose only.
package kit

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// URI is the extension's URI: the key of its metadata, the entry of
// Message.extensions and of the card's capabilities.extensions.
const URI = "https://quittance.dev/a2a/compensation/v1"

// ReceiptArtifactName is the name of the artifact that carries a receipt.
const ReceiptArtifactName = "compensation-receipt"

// Outcome is what the agent did about a compensation request.
type Outcome string

// The outcomes Quittance accepts (outcome.schema.json).
const (
	// Compensated: the task's effects were reversed. Signed as an ack.
	Compensated Outcome = "compensated"
	// NoEffects: the task committed nothing, so nothing needs reversing.
	// Signed as a declaration; Quittance releases the hold only on a
	// verified one.
	NoEffects Outcome = "no_effects"
	// Pending: the reversal is under way; the final receipt follows on the
	// same task.
	Pending Outcome = "pending"
	// Failed: the agent could not compensate now; Quittance asks again.
	Failed Outcome = "failed"
	// NotSupported: the agent will never compensate this task; Quittance
	// stops asking and leaves it to a person.
	NotSupported Outcome = "not_supported"
)

// final reports whether o ends the request: kept per idempotency key and
// answered again as it is.
func (o Outcome) final() bool { return o == Compensated || o == NoEffects || o == NotSupported }

// Params are the extension's card params the kit implements.
type Params struct {
	// Required sets the declaration's required flag: clients that do not
	// use the extension are refused (-32008).
	Required bool
	// AtomicCancel declares params.atomicCancel: Quittance then sends the
	// compensation request with its cancel, and Wrap answers it on the
	// canceled task.
	AtomicCancel bool
}

// Extension is the declaration of the extension for the card's
// capabilities.extensions, made by an agent whose receipts signer signs:
// params signedReceipts and receiptAlgs (informative), and atomicCancel
// when p says so (card.schema.json).
func Extension(signer *Signer, p Params) a2a.AgentExtension {
	params := map[string]any{"signedReceipts": true, "receiptAlgs": []string{string(signer.alg)}}
	if p.AtomicCancel {
		params["atomicCancel"] = true
	}
	return a2a.AgentExtension{
		URI:         URI,
		Required:    p.Required,
		Description: "Answers compensation requests with signed compensation receipts.",
		Params:      params,
	}
}

// Request is a compensation request as the agent received it.
type Request struct {
	// TaskID is the task whose effects are to be reversed.
	TaskID a2a.TaskID `json:"taskId"`
	// IdempotencyKey identifies the compensation: the same key asked
	// again must get the same answer, never a second reversal.
	IdempotencyKey string `json:"idempotencyKey"`
	// Reason says why (task_canceled, task_failed, ...); informative.
	Reason string `json:"reason"`
	// ExtraTaskIDs are other tasks the agent created for the same
	// delegation, to be reversed under the same key.
	ExtraTaskIDs []a2a.TaskID `json:"extraTaskIds,omitempty"`
	// RequestJWS is the ledger's signature of the request, when it sent
	// one (metadata requestJws); verify it against the ledger's published
	// JWK Set to know who asked.
	RequestJWS string `json:"-"`
}

// ErrMalformed is wrapped by RequestFrom's error for a compensation request
// that lacks its taskId or idempotencyKey.
var ErrMalformed = errors.New("malformed compensation request")

// RequestFrom finds the compensation request in msg: a data part holding
// {"compensationRequest": {...}}. ok is false when msg carries none.
func RequestFrom(msg *a2a.Message) (req Request, ok bool, err error) {
	if msg == nil {
		return Request{}, false, nil
	}
	for _, p := range msg.Parts {
		data, isMap := p.Data().(map[string]any)
		if !isMap || data["compensationRequest"] == nil {
			continue
		}
		b, err := json.Marshal(data["compensationRequest"])
		if err != nil {
			return Request{}, true, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if err := json.Unmarshal(b, &req); err != nil {
			return Request{}, true, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if req.TaskID == "" || req.IdempotencyKey == "" {
			return Request{}, true, fmt.Errorf("%w: taskId and idempotencyKey are required", ErrMalformed)
		}
		if meta, isMap := msg.Metadata[URI].(map[string]any); isMap {
			req.RequestJWS, _ = meta["requestJws"].(string)
		}
		return req, true, nil
	}
	return Request{}, false, nil
}

// RequestFromCancel finds the compensation request in the metadata of a
// cancel (ExecutorContext.Metadata of Cancel): Quittance sends one to an
// agent that declares atomicCancel. ok is false when there is none.
func RequestFromCancel(metadata map[string]any) (req Request, ok bool, err error) {
	m, isMap := metadata[URI].(map[string]any)
	if !isMap || m["taskId"] == nil {
		return Request{}, false, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return Request{}, true, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return Request{}, true, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if req.TaskID == "" || req.IdempotencyKey == "" {
		return Request{}, true, fmt.Errorf("%w: taskId and idempotencyKey are required", ErrMalformed)
	}
	req.RequestJWS, _ = m["requestJws"].(string)
	return req, true, nil
}

// Result is what the org's compensation did.
type Result struct {
	// Outcome is what was done.
	Outcome Outcome
	// ReceiptID is the org's id for the compensation; one is made from the
	// idempotency key when empty.
	ReceiptID string
	// Reason explains a failed, not_supported or pending outcome.
	Reason string
	// ReversedAmountMinor is how much of the hold was reversed, in minor
	// units, for a partial compensation (Compensated only); nil: all of it.
	ReversedAmountMinor *int64
}

// Receipt is the data of a compensation-receipt artifact
// (receipt.schema.json).
type Receipt struct {
	Outcome             Outcome    `json:"outcome"`
	ReceiptID           string     `json:"receiptId,omitempty"`
	TaskID              a2a.TaskID `json:"taskId"`
	IdempotencyKey      string     `json:"idempotencyKey"`
	JWS                 string     `json:"jws,omitempty"`
	Reason              string     `json:"reason,omitempty"`
	ReversedAmountMinor *int64     `json:"reversedAmountMinor,omitempty"`
}

// Artifact is the receipt as the artifact event of the task info (the
// compensation task) that carries it.
func (r Receipt) Artifact(info a2a.TaskInfoProvider) (*a2a.TaskArtifactUpdateEvent, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var data map[string]any
	if err := json.Unmarshal(b, &data); err != nil {
		return nil, err
	}
	part := a2a.NewDataPart(data)
	part.MediaType = "application/json"
	ev := a2a.NewArtifactEvent(info, part)
	ev.Artifact.Name = ReceiptArtifactName
	ev.Artifact.Extensions = []string{URI}
	return ev, nil
}
