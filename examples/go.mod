module github.com/purgatory-go/purgatory/examples

go 1.26.0

replace github.com/purgatory-go/purgatory => ..

require (
	github.com/purgatory-go/purgatory v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go v1.22.2
	github.com/twmb/franz-go/pkg/kmsg v1.15.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
)
