// Package panics turns a panic in one piece of background work (an A2A
// job, a webhook delivery, a task stream, a worker's round) into an error,
// so the worker gives that piece up, records it and goes on with the next:
// one panic on hostile remote data must not take a replica down, and then
// every replica in turn as each claims the same job.
//
// It imports no Quittance package and must never swallow a panic silently:
// callers log the *Error with its stack and count it.
package panics

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// Error is a recovered panic.
type Error struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the panicking goroutine's stack.
	Stack []byte
}

// Error implements error.
func (e *Error) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Recover calls fn and returns its error, or an *Error when fn panics.
func Recover(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &Error{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}

// As returns the recovered panic err wraps, if any.
func As(err error) (*Error, bool) {
	var p *Error
	ok := errors.As(err, &p)
	return p, ok
}

// Log logs a recovered panic of worker at error level, with its stack.
func Log(log *slog.Logger, worker string, p *Error, attrs ...slog.Attr) {
	args := []any{slog.String("worker", worker), slog.String("panic", fmt.Sprint(p.Value)), slog.String("stack", string(p.Stack))}
	for _, a := range attrs {
		args = append(args, a)
	}
	log.Error("background work panicked; it was given up and the worker goes on", args...)
}
