module github.com/purgatory-go/purgatory/contrib/timing

go 1.24

require (
	github.com/purgatory-go/purgatory v0.0.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

// The library is developed in the same repository: build against the
// checkout this module sits in, not a published version.
replace github.com/purgatory-go/purgatory => ../..
