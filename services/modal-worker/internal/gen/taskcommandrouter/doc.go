// Package taskcommandrouter holds the generated Go and gRPC stubs of our
// subset of Modal's worker-side router (package
// modal.task_command_router, service TaskCommandRouter) in
// proto/modal_proto/task_command_router.proto. Do not edit the *.pb.go
// files: regenerate them with `go generate ./services/modal-worker/`.
package taskcommandrouter
