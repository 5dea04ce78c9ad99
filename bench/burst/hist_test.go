package main

import (
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 127, 128, 129, 255, 256, 257, 511, 512, 1000, 1 << 20, 1<<40 + 12345, 1<<63 - 1} {
		b := bucketOf(v)
		if b < prev || b >= 64*sub {
			t.Fatalf("bucketOf(%d) = %d after %d", v, b, prev)
		}
		prev = b
		m := mid(b)
		if d := float64(m) - float64(v); d < 0 && -d > float64(v)/float64(sub)+1 || d > 0 && d > float64(v)/float64(sub)+1 {
			t.Fatalf("mid(bucketOf(%d)) = %d, too far", v, m)
		}
	}
	for i := 0; i < 40*sub; i++ { // contiguous: the middle of bucket i maps back to i
		if bucketOf(mid(i)) != i {
			t.Fatalf("bucket %d: mid %d maps to %d", i, mid(i), bucketOf(mid(i)))
		}
	}
}

func TestQuantile(t *testing.T) {
	var h hist
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 500}, {0.95, 950}, {0.99, 990}, {1, 1000}} {
		got := h.quantile(c.q)
		if got < c.want*0.99 || got > c.want*1.01 {
			t.Errorf("quantile(%v) = %v µs, want ~%v", c.q, got, c.want)
		}
	}
}
