"""Admission's token figure: a sound bound, then the exact count with the engine's own tokenizer and template,
never a guess (:mod:`.counter`); what cannot be counted is long."""

from servelab.gateway.admission.counter import CHAT, COMPLETIONS, Count, TokenCounter
from servelab.gateway.admission.errors import Uncountable
from servelab.gateway.admission.template import ChatTemplate, TemplateError, TemplateSet

__all__ = [
    "CHAT",
    "COMPLETIONS",
    "ChatTemplate",
    "Count",
    "TemplateError",
    "TemplateSet",
    "TokenCounter",
    "Uncountable",
]
