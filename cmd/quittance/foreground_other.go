//go:build !linux

package main

// takeTerminalForeground does nothing off Linux; see foreground_linux.go.
func takeTerminalForeground() (release func()) { return func() {} }
