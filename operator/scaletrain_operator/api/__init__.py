"""The API room: the ScaleTrainJob models (the single source of truth), the CRD and its CEL rules generated
from them, names, timestamps and the status schema. Types only: no decision, rendering or I/O, and no
torch; the models check themselves with validation/."""
