//go:build !(linux && amd64)

package tsc

// trusted reports false: only linux/amd64 reads the counter.
func trusted() bool { return false }

func rdtsc() int64 { panic("tsc: no counter on this platform") }
