package limitbuf

import "testing"

func TestBuffer(t *testing.T) {
	b := New(5)
	for _, w := range []string{"abc", "defg", "hij"} {
		if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if string(b.Bytes()) != "abcde" || !b.Truncated {
		t.Errorf("kept %q truncated=%v; want abcde, true", b.Bytes(), b.Truncated)
	}
	b = New(5)
	b.Write([]byte("abcde"))
	if b.Truncated {
		t.Error("truncated at exactly the bound")
	}
}
