__all__ = ['ttypes', 'constants', 'Metadata']
