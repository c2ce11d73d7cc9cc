// Package modalclient holds the generated Go and gRPC stubs of our subset of
// Modal's control-plane API (package modal.client, service ModalClient) in
// proto/modal_proto/api.proto. Do not edit the *.pb.go files: regenerate
// them with `go generate ./services/modal-worker/`.
package modalclient
