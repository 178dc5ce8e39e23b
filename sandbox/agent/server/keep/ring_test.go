package keep

import (
	"bytes"
	"testing"
)

func TestRing(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		writes  []string
		since   int64
		want    string
		next    int64
		dropped bool
	}{
		{"empty", 4, nil, 0, "", 0, false},
		{"all of it", 8, []string{"ab", "cd"}, 0, "abcd", 4, false},
		{"from an offset", 8, []string{"ab", "cd"}, 3, "d", 4, false},
		{"caught up", 8, []string{"ab", "cd"}, 4, "", 4, false},
		{"ahead of the stream", 8, []string{"ab"}, 9, "", 2, false},
		{"the oldest bytes go", 4, []string{"abc", "def"}, 0, "cdef", 6, true},
		{"an offset still kept", 4, []string{"abc", "def"}, 3, "def", 6, false},
		{"one write larger than the ring", 3, []string{"abcdefg"}, 0, "efg", 7, true},
		{"filled exactly", 3, []string{"abc"}, 0, "abc", 3, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRing(tt.size)
			for _, w := range tt.writes {
				r.Write([]byte(w))
			}
			got, next, dropped := r.Since(tt.since)
			if string(got) != tt.want || next != tt.next || dropped != tt.dropped {
				t.Errorf("Since(%d) = %q, %d, %v; want %q, %d, %v", tt.since, got, next, dropped, tt.want, tt.next, tt.dropped)
			}
			if r.Total() != tt.next {
				t.Errorf("Total = %d, want %d", r.Total(), tt.next)
			}
		})
	}
}

// Since hands out a copy: later writes never change what a caller holds.
func TestRingSinceCopies(t *testing.T) {
	r := NewRing(4)
	r.Write([]byte("abcd"))
	got, _, _ := r.Since(0)
	r.Write([]byte("wxyz"))
	if !bytes.Equal(got, []byte("abcd")) {
		t.Fatalf("held bytes changed to %q", got)
	}
}
