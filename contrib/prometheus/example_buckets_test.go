package purgatoryprom_test

import (
	"fmt"
	"time"

	purgatoryprom "github.com/purgatory-go/purgatory/contrib/prometheus"
)

// The default bounds, and narrower ones for a purgatory whose operations
// wait between about a millisecond and a second: powers of two stay exact.
func ExampleWithBuckets() {
	def := purgatoryprom.DefaultBuckets()
	fmt.Println(len(def), "default bounds, from", def[0], "to", def[len(def)-1])

	var narrow []time.Duration
	for _, b := range def {
		if b >= 500*time.Microsecond && b <= 2*time.Second {
			narrow = append(narrow, b)
		}
	}
	c := purgatoryprom.NewCollector(purgatoryprom.WithBuckets(narrow...))
	_ = c // c.Add(...), then register it
	fmt.Println(len(narrow), "bounds, from", narrow[0], "to", narrow[len(narrow)-1])
	// Output:
	// 25 default bounds, from 8.192µs to 2m17.438953472s
	// 12 bounds, from 524.288µs to 1.073741824s
}
