package sourcezip

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// benchTree writes a source tree of n files of size bytes each (text-like, compressible).
func benchTree(b *testing.B, n, size int) string {
	b.Helper()
	dir := b.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"func ", "return ", "if err != nil ", "{\n", "}\n", "x := ", "fmt.Println(", ")\n", "// comment\n"}
	for i := range n {
		var data []byte
		for len(data) < size {
			data = append(data, words[r.IntN(len(words))]...)
		}
		p := filepath.Join(dir, fmt.Sprintf("pkg%02d", i%10), fmt.Sprintf("file%03d.go", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data[:size], 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// BenchmarkSourceDir compares what a plan (Hash) and an apply (Zip) cost against the floor:
// reading the same files once (ReadOnly).
func BenchmarkSourceDir(b *testing.B) {
	dir := benchTree(b, 200, 20<<10) // 200 files, 4 MiB
	files, err := List(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ReadOnly", func(b *testing.B) {
		b.SetBytes(200 * 20 << 10)
		for b.Loop() {
			for _, f := range files {
				if _, err := copyFile(io.Discard, f.path); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("Hash", func(b *testing.B) {
		b.SetBytes(200 * 20 << 10)
		for b.Loop() {
			if _, err := Hash(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Zip", func(b *testing.B) {
		b.SetBytes(200 * 20 << 10)
		for b.Loop() {
			if _, _, err := Zip(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
}
