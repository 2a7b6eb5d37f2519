package text

import (
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"", 3, ""},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc"},
		{"abc", 0, ""},
		{"abc", -1, ""},
		// A rune the cut would split is dropped whole.
		{"hé!", 2, "h"},
		{"hé!", 3, "hé"},
		{"a€b", 2, "a"},
		{"a€b", 3, "a"},
		{"a€b", 4, "a€"},
		{"a😀b", 4, "a"},
		{"a😀b", 5, "a😀"},
		{"湹", 2, ""},
		// Bytes that are not UTF-8 are cut by bytes, as they come.
		{"a\x80\x80\x80\x80\x80", 3, "a\x80\x80"},
		{"\xff\xfeabc", 1, "\xff"},
	} {
		got := Truncate(tc.s, tc.n)
		if got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
		if len(got) > max(tc.n, 0) && got != tc.s {
			t.Errorf("Truncate(%q, %d) = %q: longer than %d bytes", tc.s, tc.n, got, tc.n)
		}
		if utf8.ValidString(tc.s) && !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) = %q: split a rune", tc.s, tc.n, got)
		}
	}
}

// FuzzTruncate checks the two promises on any input: at most n bytes, and
// valid UTF-8 in gives valid UTF-8 out, a prefix of the input.
func FuzzTruncate(f *testing.F) {
	f.Add("hé😀llo", 4)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := Truncate(s, n)
		if len(s) > n && len(got) > max(n, 0) {
			t.Fatalf("Truncate(%q, %d) = %q: over the bound", s, n, got)
		}
		if len(s) <= n && got != s {
			t.Fatalf("Truncate(%q, %d) = %q: cut a string within the bound", s, n, got)
		}
		if s[:len(got)] != got {
			t.Fatalf("Truncate(%q, %d) = %q: not a prefix", s, n, got)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Fatalf("Truncate(%q, %d) = %q: split a rune", s, n, got)
		}
	})
}
