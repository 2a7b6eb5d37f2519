// Package interop tests the compensation kit against Quittance itself: an
// agent built on a2a-go v2 with the kit, served on loopback, gets the
// compensation request Quittance's worker sends (delegate.CompensationRequestSend)
// through Quittance's A2A client, and its receipt is judged by
// compensation.JudgeReceipt, the function that judges every receipt. It is
// a module of its own because a2a-go v2 requires a2a-go v0.3.15, while
// Quittance's own tests keep their peer on a2a-go v0.3.3.
package interop
