module github.com/quittance/quittance/compensation/kit

go 1.26.8

require (
	github.com/a2aproject/a2a-go/v2 v2.3.1
	github.com/go-jose/go-jose/v4 v4.1.9
	github.com/gowebpki/jcs v1.0.1
)

require (
	github.com/google/uuid v1.6.0 // indirect
	golang.org/x/sync v0.19.0 // indirect
)
