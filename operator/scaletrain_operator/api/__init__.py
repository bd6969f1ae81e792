"""The API wing: the ScaleTrainJob models (the single source of truth), the CRD generated from them,
names, the pure renderer of a job's children with the podTemplate merge, the gang policy and the
progress protocol. It imports nothing from the controller or the local runner, and no torch."""
