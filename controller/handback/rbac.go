package handback

// The hand-back runs as the chart's pre-delete hook with a ServiceAccount
// of its own, whose roles the chart writes (templates/hand-back.yaml):
// scale the controller's Deployment, list the resources, patch their
// Services, list and delete EndpointSlices, and delete the registry
// objects of package access. It is not the controller's: no marker here.
