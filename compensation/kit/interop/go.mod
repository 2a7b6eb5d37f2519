module github.com/quittance/quittance/compensation/kit/interop

go 1.26.8

require (
	github.com/a2aproject/a2a-go/v2 v2.3.1
	github.com/google/uuid v1.6.0
	github.com/quittance/quittance v0.0.0
	github.com/quittance/quittance/compensation/kit v0.0.0
)

require (
	code.dny.dev/ssrf v0.3.0 // indirect
	github.com/go-jose/go-jose/v4 v4.1.9 // indirect
	github.com/gowebpki/jcs v1.0.1 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.44.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20261110000943-09e21b237f2c // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/quittance/quittance => ../../..
	github.com/quittance/quittance/compensation/kit => ..
)
