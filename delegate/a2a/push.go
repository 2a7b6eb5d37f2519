package a2a

import (
	"fmt"
	"net/http"
	"strings"
)

// ParsePushNotification parses the body of a push notification: an A2A
// v1.0 StreamResponse ({"statusUpdate":…}, {"task":…}, …) or a bare v0.3
// task, with or without "kind". The event always names a task. A push is
// only a hint that something changed: confirm it with GetTask.
func ParsePushNotification(body []byte) (StreamEvent, error) {
	ev, err := decodeEvent(body)
	if err != nil {
		return StreamEvent{}, fmt.Errorf("parse push notification: %w", err)
	}
	if ev.TaskID() == "" {
		return StreamEvent{}, fmt.Errorf("parse push notification: %w: no task id", ErrMalformedResponse)
	}
	return ev, nil
}

// PushTokenFromRequest returns the credential a remote agent presented on a
// push notification: the credentials of "Authorization: {scheme}
// {credentials}" (so "Bearer x" gives "x"), else the X-A2A-Notification-Token
// header, else the A2A-Notification-Token header; "" if none is present. The
// caller compares it, in constant time, with the token it registered.
func PushTokenFromRequest(r *http.Request) string {
	if auth := strings.TrimSpace(r.Header.Get("Authorization")); auth != "" {
		if _, cred, ok := strings.Cut(auth, " "); ok {
			if cred = strings.TrimSpace(cred); cred != "" {
				return cred
			}
		}
	}
	if tok := r.Header.Get("X-A2A-Notification-Token"); tok != "" {
		return tok
	}
	return r.Header.Get("A2A-Notification-Token")
}
