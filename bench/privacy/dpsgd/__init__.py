"""DP-SGD training for the dp_vit task: the method, its accounting, clipping variants and fusion.

``method`` names what is trained (clipping, target ε, fusion, model selection);
``accounting``, ``median`` and ``fusion`` hold the pure maths; ``train`` runs Opacus.
"""
