package a2a

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxGRPCMessageBytes caps a gRPC response message, as maxBodyBytes caps a
// JSON-RPC response.
const maxGRPCMessageBytes = maxBodyBytes

// GRPCStatusError reports a gRPC call that failed with a status naming no
// A2A error reason: the transport's own failures (Unavailable when the
// connection drops, DeadlineExceeded, ResourceExhausted) and whatever else
// a server answers without an A2A ErrorInfo. Code is the gRPC status code.
type GRPCStatusError struct {
	Code    int
	Message string
}

// Error returns the code and the message.
func (e *GRPCStatusError) Error() string {
	return fmt.Sprintf("a2a: grpc status %s: %s", codes.Code(e.Code), e.Message)
}

// retryable: the gRPC codes a call may be repeated after, unchanged.
func (e *GRPCStatusError) retryable() bool {
	switch codes.Code(e.Code) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}

// grpcBinding is the gRPC binding of A2A v1.0, through a2a-go v2's
// a2agrpc/v1 transport. A connection is opened for each call (and each
// stream) and closed after it, dialed with the dialer of the caller's
// *http.Client (dialerOf): in Quittance egress's, so the egress policy
// holds for gRPC as for HTTP. An interceptor keeps each failed call's
// gRPC status, which the SDK reduces to an error kind, so an error is the
// *RPCError its A2A ErrorInfo names, with the status details as Data, or
// else a *GRPCStatusError.
type grpcBinding struct {
	target string // the gRPC target, host:port
	u      *url.URL
	tls    bool
	dialer urlDialer
	tlsCfg *tls.Config
	d      v1Dialect
	tenant string
	setup  error // why the binding cannot be used, if it cannot
}

// urlDialer is what a transport offers to open connections under its own
// rules; egress's transport implements it.
type urlDialer interface {
	DialURL(ctx context.Context, u *url.URL) (net.Conn, error)
}

// tlsConfigurer is what a transport offers of its TLS configuration.
type tlsConfigurer interface {
	TLSClientConfig() *tls.Config
}

// dialerOf finds the dialer of hc: its transport's, looking through
// wrappers that Unwrap to the transport beneath. An *http.Transport dials
// with its DialContext; egress's transport with DialURL, under its policy.
// A transport that is neither, and wraps none, cannot carry gRPC.
func dialerOf(hc *http.Client) (urlDialer, *tls.Config, error) {
	rt := http.DefaultTransport
	if hc != nil && hc.Transport != nil {
		rt = hc.Transport
	}
	for range 16 {
		switch t := rt.(type) {
		case urlDialer:
			var cfg *tls.Config
			if c, ok := rt.(tlsConfigurer); ok {
				cfg = c.TLSClientConfig()
			}
			return t, cfg, nil
		case *http.Transport:
			// Clone sets up t first, so its TLS configuration is read
			// without racing t's first request.
			return transportDialer{t}, t.Clone().TLSClientConfig, nil
		case interface{ Unwrap() http.RoundTripper }:
			rt = t.Unwrap()
			continue
		}
		break
	}
	return nil, nil, fmt.Errorf("%w: the HTTP client's transport %T offers no dialer for gRPC", ErrNoUsableInterface, rt)
}

// transportDialer dials as an *http.Transport does.
type transportDialer struct{ t *http.Transport }

func (d transportDialer) DialURL(ctx context.Context, u *url.URL) (net.Conn, error) {
	addr := u.Host
	if u.Port() == "" {
		port := "443"
		if u.Scheme == "http" {
			port = "80"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	if d.t.DialContext != nil {
		return d.t.DialContext(ctx, "tcp", addr)
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", addr)
}

func newGRPCBinding(hc *http.Client, iface AgentInterface) binding {
	b := &grpcBinding{d: v1Dialect{tenant: iface.Tenant}, tenant: iface.Tenant}
	u, err := interfaceURL(iface)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		b.setup = fmt.Errorf("%w: gRPC interface URL %q", ErrNoUsableInterface, iface.URL)
		return b
	}
	b.u, b.tls = u, u.Scheme == "https"
	b.target = u.Host
	if b.dialer, b.tlsCfg, err = dialerOf(hc); err != nil {
		b.setup = err
	}
	return b
}

// statusKey carries a *grpcStatus for the interceptors to fill.
type statusKey struct{}

// grpcStatus is what a call learnt beyond the SDK's error: the status the
// call ended with and the error its connection failed to dial with.
type grpcStatus struct {
	st      *status.Status
	mu      sync.Mutex
	dialErr error
}

func (h *grpcStatus) dialed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.dialErr = err
	}
}

func (h *grpcStatus) dialError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dialErr
}

func keepStatus(ctx context.Context, err error) {
	if err == nil {
		return
	}
	if h, ok := ctx.Value(statusKey{}).(*grpcStatus); ok {
		if st, ok := status.FromError(err); ok {
			h.st = st
		}
	}
}

// conn opens the call's connection, whose dial errors go to h.
func (c *grpcBinding) conn(h *grpcStatus) (*grpc.ClientConn, error) {
	if c.setup != nil {
		return nil, c.setup
	}
	creds := insecure.NewCredentials()
	if c.tls {
		cfg := c.tlsCfg
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = keptCreds{TransportCredentials: credentials.NewTLS(cfg), h: h}
	}
	return grpc.NewClient("passthrough:///"+c.target,
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			conn, err := c.dialer.DialURL(ctx, c.u)
			h.dialed(err)
			return conn, err
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxGRPCMessageBytes)),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(ctx, method, req, reply, cc, opts...)
			keepStatus(ctx, err)
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			keepStatus(ctx, err)
			if err != nil {
				return nil, err
			}
			return &keptStream{ClientStream: s, ctx: ctx}, nil
		}),
	)
}

// keptCreds keeps the error of the TLS handshakes of a call's connection.
type keptCreds struct {
	credentials.TransportCredentials
	h *grpcStatus
}

func (k keptCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := k.TransportCredentials.ClientHandshake(ctx, authority, conn)
	k.h.dialed(err)
	return c, info, err
}

func (k keptCreds) Clone() credentials.TransportCredentials {
	return keptCreds{TransportCredentials: k.TransportCredentials.Clone(), h: k.h}
}

// keptStream keeps the status a stream ends with.
type keptStream struct {
	grpc.ClientStream
	ctx context.Context
}

func (s *keptStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	keepStatus(s.ctx, err)
	return err
}

// call runs one unary call on a connection of its own, within
// callTimeout.
func (c *grpcBinding) call(ctx context.Context, op string, f func(ctx context.Context, t a2aclient.Transport) error) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	h := &grpcStatus{}
	conn, err := c.conn(h)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer conn.Close()
	err = f(context.WithValue(ctx, statusKey{}, h), a2agrpc.NewGRPCTransportFromClient(a2apb.NewA2AServiceClient(conn)))
	return c.err(ctx, op, h, err)
}

// err converts the error of a call by the gRPC status it ended with.
func (c *grpcBinding) err(ctx context.Context, op string, h *grpcStatus, err error) error {
	if err == nil {
		return nil
	}
	// gRPC reports a failed dial or TLS handshake as Unavailable, text
	// only: an egress refusal or a refused certificate must stay one,
	// final.
	if dialErr := h.dialError(); dialErr != nil && !Retryable(dialErr) {
		return fmt.Errorf("%s: %w", op, dialErr)
	}
	if h.st == nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if code := h.st.Code(); code == codes.Canceled || code == codes.DeadlineExceeded {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("%s: %w", op, ctxErr)
		}
	}
	var details []json.RawMessage
	for _, d := range h.st.Proto().GetDetails() {
		if raw, err := protojson.Marshal(d); err == nil {
			details = append(details, raw)
		}
	}
	if rpcErr := statusDetailsError(h.st.Message(), details); rpcErr != nil {
		return fmt.Errorf("%s: %w", op, rpcErr)
	}
	if h.st.Code() == codes.ResourceExhausted && strings.Contains(h.st.Message(), "larger than max") {
		// The client's own limit on a message (maxGRPCMessageBytes), not
		// the server's: the same answer again would be as large.
		return fmt.Errorf("%s: %w: %s", op, ErrBodyTooLarge, h.st.Message())
	}
	if h.st.Code() == codes.Unimplemented {
		return fmt.Errorf("%s: %w", op, &RPCError{Code: -32601, Message: h.st.Message()})
	}
	return fmt.Errorf("%s: %w", op, &GRPCStatusError{Code: int(h.st.Code()), Message: h.st.Message()})
}

func (c *grpcBinding) sendMessage(ctx context.Context, req SendRequest) (SendResult, error) {
	_, params, _ := c.d.sendMessage(req)
	sreq, err := toSDK[sdk.SendMessageRequest](params)
	if err != nil {
		return SendResult{}, err
	}
	var res sdk.SendMessageResult
	if err := c.call(ctx, "SendMessage", func(ctx context.Context, t a2aclient.Transport) (err error) {
		res, err = t.SendMessage(ctx, sdkParams(req.Extensions), sreq)
		return err
	}); err != nil {
		return SendResult{}, err
	}
	return sdkSendResult(res)
}

func (c *grpcBinding) getTask(ctx context.Context, id string) (Task, error) {
	var task *sdk.Task
	if err := c.call(ctx, "GetTask", func(ctx context.Context, t a2aclient.Transport) (err error) {
		task, err = t.GetTask(ctx, sdkParams(nil), &sdk.GetTaskRequest{Tenant: c.tenant, ID: sdk.TaskID(id)})
		return err
	}); err != nil {
		return Task{}, err
	}
	return sdkTask(task)
}

func (c *grpcBinding) listTasks(ctx context.Context, req ListTasksRequest) (ListTasksResult, error) {
	_, params := c.d.listTasks(req)
	lreq, err := toSDK[sdk.ListTasksRequest](params)
	if err != nil {
		return ListTasksResult{}, err
	}
	var res *sdk.ListTasksResponse
	if err := c.call(ctx, "ListTasks", func(ctx context.Context, t a2aclient.Transport) (err error) {
		res, err = t.ListTasks(ctx, sdkParams(nil), lreq)
		return err
	}); err != nil {
		return ListTasksResult{}, err
	}
	return sdkListResult(res)
}

func (c *grpcBinding) cancelTask(ctx context.Context, id string, extensions []string, metadata json.RawMessage) (Task, error) {
	_, params := c.d.cancelTask(id, metadata)
	creq, err := toSDK[sdk.CancelTaskRequest](params)
	if err != nil {
		return Task{}, err
	}
	var task *sdk.Task
	if err := c.call(ctx, "CancelTask", func(ctx context.Context, t a2aclient.Transport) (err error) {
		task, err = t.CancelTask(ctx, sdkParams(extensions), creq)
		return err
	}); err != nil {
		return Task{}, err
	}
	return sdkTask(task)
}

func (c *grpcBinding) setPushConfig(ctx context.Context, taskID string, pc PushConfig) error {
	_, params := c.d.setPushConfig(taskID, pc)
	preq, err := toSDK[sdk.PushConfig](params)
	if err != nil {
		return err
	}
	return c.call(ctx, "CreateTaskPushNotificationConfig", func(ctx context.Context, t a2aclient.Transport) error {
		_, err := t.CreateTaskPushConfig(ctx, sdkParams(nil), preq)
		return err
	})
}

func (c *grpcBinding) subscribe(ctx context.Context, taskID string) iter.Seq2[StreamEvent, error] {
	return func(yield func(StreamEvent, error) bool) {
		h := &grpcStatus{}
		conn, err := c.conn(h)
		if err != nil {
			yield(StreamEvent{}, fmt.Errorf("SubscribeToTask: %w", err))
			return
		}
		defer conn.Close()
		t := a2agrpc.NewGRPCTransportFromClient(a2apb.NewA2AServiceClient(conn))
		sctx, cancel := context.WithCancel(context.WithValue(ctx, statusKey{}, h))
		defer cancel()
		for ev, err := range t.SubscribeToTask(sctx, sdkParams(nil), &sdk.SubscribeToTaskRequest{Tenant: c.tenant, ID: sdk.TaskID(taskID)}) {
			var se StreamEvent
			if err == nil {
				se, err = sdkEvent(ev)
			} else {
				err = c.err(ctx, "SubscribeToTask", h, err)
			}
			if !yield(se, err) || err != nil {
				return
			}
		}
	}
}

// grpcRetryable reports whether err is a gRPC status a call may be
// repeated after.
func grpcRetryable(err error) (retryable, ok bool) {
	var gErr *GRPCStatusError
	if errors.As(err, &gErr) {
		return gErr.retryable(), true
	}
	return false, false
}
