// Package ratelimit is Quittance's one rate limiter, shared by the HTTP API
// and the web console so that both doors follow one rule: token buckets of
// golang.org/x/time/rate, one per principal and one per client address
// (an IPv4 address, or an IPv6 /64).
//
// A request known to be a principal's, without a database lookup, is
// charged to the principal's bucket. Any other request holds a token of its
// client address's bucket while it runs (Lookup): if it proves to be a
// principal's its lookup is not charged to the address, only to the
// principal; otherwise (no credential, an unknown or revoked one, a public
// endpoint) the token is spent. An address therefore gets at most one
// credential lookup per token of its budget, however many credentials it
// tries, and principals behind one address do not spend each other's.
//
// It must never see or log a credential, and never look anything up itself:
// callers do the lookup between Lookup and Known or Refused.
package ratelimit
