package gateway

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/gobwas/ws"
)

// frameStream encodes frames chosen by spec, one byte each: the low nibble picks the
// opcode, bit 4 the mask, the top three bits the payload length (every length encoding).
// It returns the bytes and, for each frame, the offset of its end.
func frameStream(spec []byte) ([]byte, []int, []bool) {
	ops := []ws.OpCode{ws.OpContinuation, ws.OpText, ws.OpBinary, ws.OpClose, ws.OpPing, ws.OpPong}
	lengths := []int64{0, 5, 125, 126, 300, 65535, 65536, 70000}
	var buf bytes.Buffer
	var ends []int
	var closed []bool
	seen := false
	for _, b := range spec[:min(len(spec), 16)] {
		h := ws.Header{Fin: true, OpCode: ops[int(b&0x0f)%len(ops)], Masked: b&0x10 != 0, Length: lengths[b>>5]}
		if h.Masked {
			h.Mask = [4]byte{1, 2, 3, 4}
		}
		_ = ws.WriteHeader(&buf, h)
		buf.Write(make([]byte, h.Length))
		seen = seen || h.OpCode == ws.OpClose
		ends = append(ends, buf.Len())
		closed = append(closed, seen)
	}
	return buf.Bytes(), ends, closed
}

// FuzzFrames: however a function's frames are split into reads, the gateway knows when it
// stands between two of them, and whether a close frame went by.
func FuzzFrames(f *testing.F) {
	f.Add([]byte{0x01}, []byte{0})
	f.Add([]byte{0x61, 0x13, 0xe2, 0x03}, []byte{1, 2, 200, 7})
	f.Add([]byte{0xa1, 0xb3, 0xc0}, []byte{255})
	f.Fuzz(func(t *testing.T, spec, splits []byte) {
		stream, ends, closed := frameStream(spec)
		var fr frames
		at, next := 0, 0
		for i := 0; at < len(stream); i++ {
			size := 1
			if len(splits) > 0 {
				size = int(splits[i%len(splits)])*int(splits[i%len(splits)]) + 1
			}
			chunk := stream[at:min(len(stream), at+size)]
			fr.feed(chunk)
			at += len(chunk)
			for next < len(ends) && ends[next] < at {
				next++
			}
			atEnd := next < len(ends) && ends[next] == at
			if fr.lost || fr.between() != atEnd {
				t.Fatalf("after %d of %d bytes (frame ends %v): between %v, lost %v", at, len(stream), ends, fr.between(), fr.lost)
			}
			if atEnd && fr.closed != closed[next] {
				t.Fatalf("after frame %d: closed %v, want %v", next, fr.closed, closed[next])
			}
		}
	})
}

// FuzzFramesOfAnyBytes: bytes that are no frames never panic the gateway, and it claims to
// stand between frames only where a frame could end.
func FuzzFramesOfAnyBytes(f *testing.F) {
	f.Add([]byte{0x81, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte("HTTP/1.1 200 OK\r\n"))
	f.Fuzz(func(t *testing.T, p []byte) {
		var fr frames
		fr.feed(p)
		if fr.between() && (fr.n != 0 || fr.left != 0) {
			t.Fatalf("between frames with %d header bytes held and %d payload bytes to come", fr.n, fr.left)
		}
	})
}

func TestFramesOfKnownStreams(t *testing.T) {
	for _, tc := range []struct {
		name            string
		p               []byte
		between, closed bool
	}{
		{"nothing yet", nil, true, false},
		{"one byte of a header", []byte{0x81}, false, false},
		{"a whole text frame", []byte{0x81, 2, 'h', 'i'}, true, false},
		{"a frame cut short", []byte{0x81, 5, 'h', 'i'}, false, false},
		{"a 16-bit length half read", []byte{0x82, 126, 0x01}, false, false},
		{"a 16-bit length frame", append([]byte{0x82, 126, 0, 3}, "abc"...), true, false},
		{"a close frame", []byte{0x88, 2, 0x03, 0xe8}, true, true},
		{"a masked empty ping", []byte{0x89, 0x80, 1, 2, 3, 4}, true, false},
		{"a 64-bit length with its top bit set", []byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fr frames
			fr.feed(tc.p)
			if fr.between() != tc.between || fr.closed != tc.closed {
				t.Errorf("between %v closed %v, want %v %v", fr.between(), fr.closed, tc.between, tc.closed)
			}
		})
	}
}

// BenchmarkFrames: following the frames of what a function sends on a WebSocket, against the
// copy of the same bytes that passing them on takes anyway; 1 MiB in 32 KiB reads (the
// proxy's buffer), as small messages and as large ones.
func BenchmarkFrames(b *testing.B) {
	for _, size := range []int{64, 16 << 10} {
		var stream bytes.Buffer
		for stream.Len() < 1<<20 {
			_ = ws.WriteFrame(&stream, ws.NewTextFrame(make([]byte, size)))
		}
		p, dst := stream.Bytes(), make([]byte, 32<<10)
		b.Run(fmt.Sprintf("copy/%dB", size), func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				for at := 0; at < len(p); at += len(dst) {
					copy(dst, p[at:])
				}
			}
		})
		b.Run(fmt.Sprintf("copy+frames/%dB", size), func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				var fr frames
				for at := 0; at < len(p); at += len(dst) {
					n := copy(dst, p[at:])
					fr.feed(dst[:n])
				}
				if !fr.between() {
					b.Fatal("the stream did not end between frames")
				}
			}
		})
	}
}
