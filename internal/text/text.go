// Package text bounds the text Quittance keeps from elsewhere: error
// messages, remote agents' words, in events and last_error columns. One
// place decides how text is cut, so every column and event cuts it alike.
//
// It imports no Quittance package and knows nothing of where the text is
// kept.
package text

import "unicode/utf8"

// Truncate returns s cut to at most n bytes. The cut is by bytes, so a
// bound is a bound on storage, but it never splits a rune: a rune the cut
// would split is dropped whole, so valid UTF-8 stays valid (PostgreSQL text
// refuses a split rune). Bytes that were not UTF-8 to begin with are left
// as they are; ledger.StorableText is what makes text storable.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	if utf8.RuneStart(s[n]) {
		return s[:n] // s[n] starts a rune: the cut splits none
	}
	// s[n] continues a rune. Find the byte that starts it (at most
	// utf8.UTFMax-1 bytes back) and drop the rune if the cut splits it.
	for i := n - 1; i >= 0 && i > n-utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRuneInString(s[i:n]) {
				return s[:i]
			}
			break
		}
	}
	return s[:n]
}
