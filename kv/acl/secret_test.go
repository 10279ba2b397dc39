package acl

import (
	"errors"
	"strings"
	"testing"
)

func TestParseBearer(t *testing.T) {
	good, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		header string
		want   error
	}{
		{"Bearer " + good, nil},
		{"bearer  " + good, nil},
		{"", ErrNoToken},
		{good, ErrMalformedToken},                           // no scheme
		{"Basic " + good, ErrMalformedToken},                // another scheme
		{"Bearer " + good[:len(good)-1], ErrMalformedToken}, // truncated
		{"Bearer " + good + "A", ErrMalformedToken},         // too long
		{"Bearer " + strings.Replace(good, "keel_", "keal_", 1), ErrMalformedToken},
		{"Bearer keel_" + strings.Repeat("!", 43), ErrMalformedToken}, // not base64url
		{"Bearer " + good + " ", ErrMalformedToken},
		{"Bearer " + strings.Repeat("x", 300), ErrMalformedToken},
	}
	for i, tt := range tests {
		got, err := ParseBearer(tt.header)
		if !errors.Is(err, tt.want) {
			t.Errorf("#%d: err = %v, want %v", i, err, tt.want)
		}
		if err == nil && got != good {
			t.Errorf("#%d: secret = %q, want %q", i, got, good)
		}
		if err != nil && strings.Contains(err.Error(), good[5:]) {
			t.Errorf("#%d: error %q holds the secret", i, err)
		}
	}
}

// FuzzParseBearer: any header either parses to a secret of the exact shape NewSecret
// makes, which the header contains, or fails with one of the two sentinels; it never
// panics, and an error never echoes the header.
func FuzzParseBearer(f *testing.F) {
	f.Add("Bearer keel_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("")
	f.Add("Bearer ")
	f.Fuzz(func(t *testing.T, header string) {
		s, err := ParseBearer(header)
		if err != nil {
			// Only the fixed sentinels: nothing of the header reaches the message.
			if err != ErrNoToken && err != ErrMalformedToken {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if CheckSecret(s) != nil || !strings.HasSuffix(header, s) || len(s) != secretLen {
			t.Fatalf("parsed %q from %q: not a well-formed secret of the header", s, header)
		}
	})
}
