module github.com/purgatory-go/purgatory/examples

go 1.24.0

replace github.com/purgatory-go/purgatory => ..

require (
	github.com/purgatory-go/purgatory v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
