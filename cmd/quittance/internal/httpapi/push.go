package httpapi

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/google/uuid"

	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/delegate/a2a"
)

// PushReceiver takes push notifications from remote agents. The
// delegate.Worker implements it: it checks the delegation's push token,
// and treats the notification as a hint to fetch the task, never as
// evidence.
type PushReceiver interface {
	ReceivePush(ctx context.Context, id uuid.UUID, token string, body []byte) error
}

// registerPush serves POST /a2a/push/{delegation_id}, where remote agents
// deliver push notifications for tasks Quittance dispatched. It is not an
// API operation (agents authenticate with the per-delegation push token,
// not a bearer API token, and send A2A bodies), so it is served on the mux
// directly and left out of the OpenAPI document.
func (s *Server) registerPush() {
	if s.push == nil {
		return
	}
	s.mux.HandleFunc("POST /a2a/push/{id}", s.receivePush)
}

// receivePush accepts the token in Authorization ("Bearer x" or any
// scheme), X-A2A-Notification-Token or A2A-Notification-Token; a v1.0
// StreamResponse or a bare v0.3 Task; application/json or
// application/a2a+json. It answers 202 once the hint is queued.
func (s *Server) receivePush(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		s.writeHTTPProblem(w, r, pushRealm, delegate.ErrPushUnauthorized)
		return
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/json" && mt != "application/a2a+json" {
		s.writeHTTPProblem(w, r, pushRealm, newProblem(http.StatusUnsupportedMediaType, "unsupported_media_type",
			"push notifications must be application/json or application/a2a+json"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, delegate.MaxPushBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			s.writeHTTPProblem(w, r, pushRealm, newProblem(http.StatusRequestEntityTooLarge, "body_too_large", "the push notification is too large"))
			return
		}
		s.writeHTTPProblem(w, r, pushRealm, newProblem(http.StatusBadRequest, "bad_request", "the push notification body could not be read"))
		return
	}
	if err := s.push.ReceivePush(ctx, id, a2a.PushTokenFromRequest(r), body); err != nil {
		s.writeHTTPProblem(w, r, pushRealm, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}
