package lincheck

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// baseSeed is the seed of a run's first history.
func baseSeed() uint64 {
	if *seedFlag != 0 {
		return uint64(*seedFlag)
	}
	return uint64(time.Now().UnixNano())
}

// hunt runs histories of a workload for -lincheck.duration (at least
// one), and fails the test with the smallest history found for each kind
// of failure. Once something has failed, every other history is a
// smaller one (fewer goroutines and calls), to find a shorter printout;
// the rates reported count only the full-size histories.
func hunt(t *testing.T, name string, run func(seed uint64, shrink *rand.Rand) []failure) {
	seed := baseSeed()
	deadline := time.Now().Add(*duration)
	hits := map[string]int{}
	best := map[string]failure{}
	full, n := 0, 0
	shrinker := rand.New(rand.NewPCG(seed, 1))
	for n == 0 || time.Now().Before(deadline) {
		var sh *rand.Rand
		if len(best) > 0 && n%2 == 1 {
			sh = shrinker
		} else {
			full++
		}
		fails := run(seed+uint64(n), sh)
		seen := map[string]bool{}
		for _, f := range fails {
			if sh == nil && !seen[f.kind] {
				hits[f.kind]++
				seen[f.kind] = true
			}
			if b, ok := best[f.kind]; !ok || f.size < b.size {
				best[f.kind] = f
			}
		}
		n++
	}
	t.Logf("%s: %d histories (%d full-size), seeds from %d", name, n, full, seed)
	kinds := make([]string, 0, len(best))
	for k := range best {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		f := best[k]
		rate := "only in smaller histories"
		if hits[k] > 0 {
			rate = fmt.Sprintf("in %d of %d full-size histories (1 in %.0f)", hits[k], full, float64(full)/float64(hits[k]))
		}
		vis := ""
		if f.ops != nil && *visualize {
			vis = writeVisualization(t, name, f)
		}
		t.Errorf("%s\n  %s; smallest: seed %d, %s\n%s%s", k, rate, f.seed, f.shape, f.text, vis)
	}
}

// writeVisualization writes porcupine's visualization of the failing
// history and returns a line naming the file.
func writeVisualization(t *testing.T, name string, f failure) string {
	res, info := porcupine.CheckOperationsVerbose(f.model, f.ops, *checkTimeout)
	if res != porcupine.Illegal {
		return fmt.Sprintf("  (porcupine said %v when checked again with visualization)\n", res)
	}
	dir := os.Getenv("LINCHECK_OUT")
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("lincheck-%s-%d.html", filepath.Base(filepath.Clean(name)), f.seed))
	if err := porcupine.VisualizePath(f.model, info, path); err != nil {
		return fmt.Sprintf("  visualization: %v\n", err)
	}
	return fmt.Sprintf("  visualization: %s\n", path)
}
