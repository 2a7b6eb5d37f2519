package httpapi

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/ledger/audit"
)

// CheckpointBody is a signed checkpoint over the heads of the event streams
// that moved in its span of the feed (ledger/AUDIT.md). Payload is what was signed; JWS verifies it against
// /.well-known/jwks.json, and is all an auditor needs to keep.
type CheckpointBody struct {
	ID          int64           `json:"id" doc:"The checkpoint's number, from 1, with no gaps."`
	At          time.Time       `json:"at" doc:"When it was signed."`
	CreatedBy   string          `json:"created_by" doc:"principal:<id> for one made on demand, system:checkpoints for a periodic one."`
	KeyID       string          `json:"kid" doc:"The ledger key (in /.well-known/jwks.json) that signed it."`
	Streams     int             `json:"streams" doc:"How many stream heads it signs: those of the streams that moved in its span."`
	HeadsSHA256 string          `json:"heads_sha256" doc:"Hex SHA-256 of the signed heads' JSON."`
	Payload     json.RawMessage `json:"payload" doc:"The signed content: ledger_id, id, at, previous (hex SHA-256 of the previous checkpoint's JWS), through (the feed position of its span's last event) and streams (the last seq and hash of each stream with an event in the span; a stream's signed head is in the latest checkpoint listing it)."`
	JWS         string          `json:"jws" doc:"The compact JWS (EdDSA, typ quittance-checkpoint+json) of payload."`
}

func checkpointBody(c audit.Checkpoint) CheckpointBody {
	return CheckpointBody{
		ID: c.ID, At: c.At, CreatedBy: c.CreatedBy, KeyID: c.KeyID, Streams: c.Streams,
		HeadsSHA256: hex.EncodeToString(c.HeadsSHA256), Payload: c.Payload, JWS: c.JWS,
	}
}

// registerCheckpoints serves the signed checkpoints, when the ledger makes
// them.
func (s *Server) registerCheckpoints() {
	if s.checkpoints == nil {
		return
	}
	tags := []string{"audit"}
	huma.Register(s.api, huma.Operation{
		OperationID: "create-checkpoint", Method: http.MethodPost, Path: "/admin/v1/checkpoints", Tags: tags,
		Summary: "Sign a checkpoint now, covering every event committed before the request (on-call)",
		Description: "Signs the heads of the streams that moved since the previous checkpoint, in as many checkpoints as spans of " +
			"20,000 events need, and returns the last. The ledger also signs them every QUITTANCE_CHECKPOINT_INTERVAL when any " +
			"stream moved. 409 checkpoints_unavailable without a signing key; 409 checkpoint_held_back when a transaction held " +
			"open on the database server keeps events committed before the request from being covered for over 10 s.",
		Security: bearerAuth, DefaultStatus: http.StatusCreated,
	}, s.createCheckpoint)
	huma.Register(s.api, huma.Operation{
		OperationID: "latest-checkpoint", Method: http.MethodGet, Path: "/v1/checkpoints/latest", Tags: tags,
		Summary: "The newest signed checkpoint (finance, on-call); 404 before the first", Security: bearerAuth,
	}, s.latestCheckpoint)
	huma.Register(s.api, huma.Operation{
		OperationID: "list-checkpoints", Method: http.MethodGet, Path: "/v1/checkpoints", Tags: tags,
		Summary: "Signed checkpoints, oldest first (finance, on-call)", Security: bearerAuth,
	}, s.listCheckpoints)
}

type checkpointOutput struct {
	Status int
	Body   CheckpointBody
}

// createCheckpoint serves POST /admin/v1/checkpoints: sign a checkpoint now,
// covering every event committed before the request (on-call).
func (s *Server) createCheckpoint(ctx context.Context, _ *struct{}) (*checkpointOutput, error) {
	c, err := s.checkpoints.Create(ctx, principal(ctx))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &checkpointOutput{Status: http.StatusCreated, Body: checkpointBody(c)}, nil
}

// latestCheckpoint serves GET /v1/checkpoints/latest: the newest signed
// checkpoint (finance, on-call); 404 before the first.
func (s *Server) latestCheckpoint(ctx context.Context, _ *struct{}) (*checkpointOutput, error) {
	c, err := s.checkpoints.Latest(ctx, principal(ctx))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &checkpointOutput{Status: http.StatusOK, Body: checkpointBody(c)}, nil
}

type listCheckpointsInput struct {
	After int64 `query:"after" minimum:"0" doc:"Only checkpoints with a larger id."`
	Limit int   `query:"limit" minimum:"0" maximum:"500" doc:"At most this many (default 50)."`
}

type listCheckpointsOutput struct {
	Body struct {
		Checkpoints []CheckpointBody `json:"checkpoints"`
		// NextAfter is the after of the next page; empty on the last.
		NextAfter string `json:"next_after,omitempty" doc:"Pass as after for the next page; absent on the last page."`
	}
}

// listCheckpoints serves GET /v1/checkpoints: signed checkpoints, oldest
// first (finance, on-call).
func (s *Server) listCheckpoints(ctx context.Context, in *listCheckpointsInput) (*listCheckpointsOutput, error) {
	list, err := s.checkpoints.List(ctx, principal(ctx), in.After, in.Limit)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &listCheckpointsOutput{}
	out.Body.Checkpoints = bodies(list, checkpointBody)
	limit := in.Limit
	if limit == 0 {
		limit = 50
	}
	if n := len(list); n > 0 && n == limit {
		out.Body.NextAfter = strconv.FormatInt(list[n-1].ID, 10)
	}
	return out, nil
}
