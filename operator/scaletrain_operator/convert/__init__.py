"""Kubeflow training jobs as ScaleTrainJobs: what `scaletrain convert` runs.

A PyTorchJob (kubeflow.org/v1) or a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1, with the
ClusterTrainingRuntime or TrainingRuntime it references among the same documents) becomes one
ScaleTrainJob. Each source field lands in a first-class spec field where one exists, else in
spec.podTemplate, or is reported as unmapped with its path and why. Input that cannot make a job at all
raises ConversionError listing every problem; the job made is checked with parse_job. The mapping table
is in docs/convert.md.

The modules: documents.py finds the job among the documents and makes the ScaleTrainJob (convert);
pytorchjob.py and trainjob.py read each kind; pod_template.py reads the pod template, the same in both;
common.py holds the findings and the reads they share.
"""

from .common import Conversion, ConversionError, Finding
from .documents import convert

__all__ = ["Conversion", "ConversionError", "Finding", "convert"]
