// Package text bounds the text Quittance keeps from elsewhere: error
// messages, remote agents' words, in events and last_error columns. One
// place decides how text is cut, so every column and event cuts it alike.
//
// It imports no Quittance package and knows nothing of where the text is
// kept.
package text

// Truncate returns s cut to at most n bytes. The cut is by bytes, not
// runes, so a bound is a bound on storage; JSON encoding of the result
// replaces a split rune with U+FFFD.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
