package a2a

import (
	"errors"
	"net/http"
	"testing"
)

func TestParsePushNotification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		body  string
		kind  string
		state TaskState
	}{
		{"v1.0 status update", `{"statusUpdate":{"taskId":"t-1","contextId":"c","status":{"state":"TASK_STATE_CANCELED","timestamp":"2026-03-01T10:00:00Z"}}}`, "status", TaskStateCanceled},
		{"v1.0 task", `{"task":{"id":"t-1","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"}}}`, "task", TaskStateCompleted},
		{"v1.0 artifact update", `{"artifactUpdate":{"taskId":"t-1","contextId":"c","artifact":{"artifactId":"a","parts":[{"text":"x"}]}}}`, "artifact", ""},
		{"v1.0 message in a task", `{"message":{"messageId":"m","taskId":"t-1","role":"ROLE_AGENT","parts":[]}}`, "message", ""},
		{"v1.0 numeric enum", `{"statusUpdate":{"taskId":"t-1","status":{"state":4}}}`, "status", TaskStateFailed},
		{"v0.3 task with kind", `{"kind":"task","id":"t-1","contextId":"c","status":{"state":"input-required"}}`, "task", TaskStateInputRequired},
		{"v0.3 task without kind", `{"id":"t-1","contextId":"c","status":{"state":"canceled"},"history":[]}`, "task", TaskStateCanceled},
		{"v0.3 status update", `{"kind":"status-update","taskId":"t-1","contextId":"c","final":true,"status":{"state":"rejected"}}`, "status", TaskStateRejected},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := ParsePushNotification([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if ev.TaskID() != "t-1" {
				t.Fatalf("task id = %q", ev.TaskID())
			}
			var state TaskState
			switch tc.kind {
			case "task":
				state = ev.Task.Status.State
			case "status":
				state = ev.StatusUpdate.Status.State
			case "artifact":
				if ev.ArtifactUpdate == nil {
					t.Fatalf("event = %+v", ev)
				}
			case "message":
				if ev.Message == nil || ev.Message.Role != RoleAgent {
					t.Fatalf("event = %+v", ev)
				}
			}
			if state != tc.state {
				t.Fatalf("state = %q, want %q", state, tc.state)
			}
		})
	}
}

func TestParsePushNotificationRejects(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"not JSON":             `task=1`,
		"empty object":         `{}`,
		"array":                `[]`,
		"null":                 `null`,
		"two members":          `{"task":{"id":"t","status":{"state":"working"}},"statusUpdate":{"taskId":"t","status":{"state":"working"}}}`,
		"task without id":      `{"task":{"status":{"state":"TASK_STATE_WORKING"}}}`,
		"unspecified state":    `{"statusUpdate":{"taskId":"t","status":{"state":"TASK_STATE_UNSPECIFIED"}}}`,
		"missing state":        `{"kind":"task","id":"t","status":{}}`,
		"unknown state":        `{"kind":"task","id":"t","status":{"state":"paused"}}`,
		"bad timestamp":        `{"kind":"task","id":"t","status":{"state":"working","timestamp":"yesterday"}}`,
		"message without task": `{"message":{"messageId":"m","role":"ROLE_AGENT","parts":[]}}`,
		"unknown kind":         `{"kind":"receipt","id":"t"}`,
		"bad base64":           `{"task":{"id":"t","status":{"state":"working"},"artifacts":[{"artifactId":"a","parts":[{"raw":"%%%"}]}]}}`,
	} {
		if ev, err := ParsePushNotification([]byte(body)); !errors.Is(err, ErrMalformedResponse) {
			t.Errorf("%s: got %+v, %v; want ErrMalformedResponse", name, ev, err)
		}
	}
}

func TestPushTokenFromRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"bearer", map[string]string{"Authorization": "Bearer abc"}, "abc"},
		{"other scheme", map[string]string{"Authorization": "Token xyz"}, "xyz"},
		{"x token", map[string]string{"X-A2A-Notification-Token": "t1"}, "t1"},
		{"token without x", map[string]string{"A2A-Notification-Token": "t2"}, "t2"},
		{"authorization first", map[string]string{"Authorization": "Bearer abc", "X-A2A-Notification-Token": "t1"}, "abc"},
		{"scheme without credentials", map[string]string{"Authorization": "Bearer", "X-A2A-Notification-Token": "t1"}, "t1"},
		{"none", map[string]string{}, ""},
	}
	for _, tc := range tests {
		r, _ := http.NewRequest(http.MethodPost, "https://q.example/push", nil)
		for k, v := range tc.headers {
			r.Header.Set(k, v)
		}
		if got := PushTokenFromRequest(r); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}
